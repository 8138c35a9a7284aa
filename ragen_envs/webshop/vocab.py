"""Hand-written vocabulary of the mini catalog: 42 product types in WebShop's five categories.

Each type has a scraped-search ``query`` (shared by its products, like upstream's ``query``
field), a ``product_category`` path, the noun phrase its titles use, a pool of attribute
phrases (products draw several, goals a few of those), an option schema (``name -> value
pool``; products offer a subset of each pool), the chance that a product has options at all,
and a price band. Option values are chosen so that buying the goal's own product with the
goal's own options scores exactly 1.0 under the upstream reward (a test checks every goal).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ProductType", "PRODUCT_TYPES", "CATEGORIES", "BRAND_SYLLABLES", "FILLERS"]

CATEGORIES = ("beauty", "electronics", "fashion", "garden", "grocery")


@dataclass(frozen=True)
class ProductType:
    category: str
    query: str
    path: tuple[str, ...]
    noun: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    p_options: float
    price: tuple[float, float]


_FASHION_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large")
_CLOTH_COLORS = ("black", "white", "navy blue", "heather grey", "burgundy", "olive green", "light pink", "beige", "charcoal", "red")
_TECH_COLORS = ("black", "white", "silver", "space gray", "rose gold", "blue")
_HOME_COLORS = ("ivory", "navy blue", "sage green", "dark grey", "mustard yellow", "blush pink", "teal", "beige")
_PACKS = ("pack of 1", "pack of 2", "pack of 4", "pack of 6", "pack of 12")
_SHOE_SIZES = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "10", "11")
_FL_OZ = ("1.7 fl oz", "3.4 fl oz", "6.8 fl oz", "8 fl oz", "16 fl oz")

PRODUCT_TYPES: tuple[ProductType, ...] = (
    # ------------------------------------------------------------------ beauty
    ProductType("beauty", "shampoo", ("Beauty & Personal Care", "Hair Care", "Shampoo & Conditioner", "Shampoos"), "Shampoo",
                ("sulfate free", "paraben free", "cruelty free", "tea tree", "argan oil", "dry hair", "color treated hair",
                 "hair growth", "anti dandruff", "natural ingredients", "fragrance free", "salon quality", "curly hair"),
                (("size", _FL_OZ), ("scent", ("lavender", "coconut", "citrus", "unscented", "eucalyptus"))), 0.52, (6, 38)),
    ProductType("beauty", "hair serum", ("Beauty & Personal Care", "Hair Care", "Styling Products", "Serums"), "Hair Serum",
                ("heat protection", "frizz control", "argan oil", "split ends", "damaged hair", "lightweight formula",
                 "paraben free", "shine boosting", "vitamin e", "curly hair", "cruelty free", "non greasy"),
                (("size", ("1 fl oz", "2 fl oz", "3.4 fl oz", "4 fl oz")),), 0.49, (8, 45)),
    ProductType("beauty", "face moisturizer", ("Beauty & Personal Care", "Skin Care", "Face", "Moisturizers"), "Face Moisturizer",
                ("hyaluronic acid", "oil free", "sensitive skin", "spf 30", "anti aging", "fine lines", "dry skin",
                 "non comedogenic", "vitamin c", "dermatologist tested", "fragrance free", "long lasting", "paraben free"),
                (("size", ("1.7 fl oz", "2.5 fl oz", "3.4 fl oz")),), 0.42, (9, 60)),
    ProductType("beauty", "lipstick", ("Beauty & Personal Care", "Makeup", "Lips", "Lipstick"), "Lipstick",
                ("long lasting", "matte finish", "highly pigmented", "cruelty free", "moisturizing formula", "vegan",
                 "transfer proof", "shea butter", "smudge proof", "satin finish", "travel size", "paraben free"),
                (("color", ("ruby red", "nude", "coral", "plum", "mauve", "rose", "wine")),), 0.59, (5, 28)),
    ProductType("beauty", "nail polish", ("Beauty & Personal Care", "Foot, Hand & Nail Care", "Nail Art & Polish", "Nail Polish"), "Nail Polish",
                ("quick dry", "long lasting", "chip resistant", "gel effect", "non toxic", "high shine", "vegan",
                 "cruelty free", "glitter finish", "easy application", "salon quality", "nail art"),
                (("color", ("cherry red", "nude", "lilac", "coral", "navy blue", "black", "silver glitter")),), 0.59, (4, 22)),
    ProductType("beauty", "eyeshadow palette", ("Beauty & Personal Care", "Makeup", "Eyes", "Eyeshadow"), "Eyeshadow Palette",
                ("highly pigmented", "matte finish", "shimmer shades", "long lasting", "blendable", "cruelty free",
                 "travel size", "crease resistant", "natural look", "smokey eye", "vegan", "mirror included"),
                (("style", ("warm tones", "cool tones", "neutral tones", "glitter tones")),), 0.35, (7, 45)),
    ProductType("beauty", "body wash", ("Beauty & Personal Care", "Skin Care", "Body", "Cleansers"), "Body Wash",
                ("sensitive skin", "shea butter", "dry skin", "natural ingredients", "paraben free", "moisturizing formula",
                 "tea tree", "sulfate free", "gentle formula", "dermatologist tested", "coconut oil", "aloe vera"),
                (("scent", ("lavender", "coconut", "citrus", "unscented", "vanilla")), ("size", ("12 fl oz", "16 fl oz", "32 fl oz"))), 0.52, (5, 30)),
    ProductType("beauty", "makeup brush set", ("Beauty & Personal Care", "Tools & Accessories", "Makeup Brushes & Tools", "Brush Sets"), "Makeup Brush Set",
                ("synthetic bristles", "cruelty free", "travel case", "soft bristles", "easy to clean", "foundation brush",
                 "eye shadow brush", "wooden handle", "high quality", "dense bristles", "gift set", "vegan"),
                (("color", ("rose gold", "black", "white", "champagne")),), 0.39, (8, 40)),
    ProductType("beauty", "hair extensions", ("Beauty & Personal Care", "Hair Care", "Hair Extensions, Wigs & Accessories", "Extensions"), "Hair Extensions",
                ("clip in", "natural looking", "human hair", "heat resistant", "straight hair", "wavy hair",
                 "easy to apply", "thick hair", "double weft", "high quality", "long hair", "synthetic fiber"),
                (("color", ("natural black", "dark brown", "ash blonde", "auburn")), ("length", ("14 inch", "18 inch", "22 inch"))), 0.59, (15, 120)),
    # ------------------------------------------------------------------ electronics
    ProductType("electronics", "wireless earbuds", ("Electronics", "Headphones, Earbuds & Accessories", "Earbuds", "Earbud Headphones"), "Wireless Earbuds",
                ("noise cancelling", "bluetooth 5.3", "charging case", "water resistant", "long battery life", "touch control",
                 "built in microphone", "deep bass", "fast charging", "sweat proof", "hands free", "low latency"),
                (("color", _TECH_COLORS),), 0.39, (19, 150)),
    ProductType("electronics", "bluetooth speaker", ("Electronics", "Portable Audio & Video", "Portable Speakers & Docks", "Portable Bluetooth Speakers"), "Bluetooth Speaker",
                ("portable speaker", "water resistant", "long battery life", "deep bass", "stereo sound", "hands free",
                 "outdoor use", "built in microphone", "usb charging", "compact design", "loud sound", "shock proof"),
                (("color", ("black", "blue", "red", "camo green")),), 0.35, (18, 130)),
    ProductType("electronics", "phone case", ("Cell Phones & Accessories", "Cases, Holsters & Sleeves", "Basic Cases"), "Phone Case",
                ("shockproof", "slim fit", "wireless charging compatible", "raised edges", "clear back", "anti scratch",
                 "drop protection", "soft tpu", "military grade", "kickstand", "card holder", "anti yellowing"),
                (("color", ("clear", "black", "navy blue", "pink", "green")), ("style", ("iphone 14", "iphone 15", "galaxy s23"))), 0.63, (6, 35)),
    ProductType("electronics", "usb c cable", ("Electronics", "Computers & Accessories", "Cables & Accessories", "USB Cables"), "USB C Cable",
                ("fast charging", "braided nylon", "data transfer", "durable design", "usb c to usb c", "60w power delivery",
                 "tangle free", "high speed", "universal compatibility", "aluminum connectors", "extra long", "short cable"),
                (("size", ("3 ft", "6 ft", "10 ft")), ("count", ("1 pack", "2 pack", "3 pack"))), 0.49, (6, 25)),
    ProductType("electronics", "hdmi cable", ("Electronics", "Television & Video", "Accessories", "Cables", "HDMI Cables"), "HDMI Cable",
                ("4k resolution", "high speed", "ethernet support", "gold plated", "braided nylon", "8k resolution",
                 "durable design", "gaming console", "home theater", "tangle free", "extra long", "backward compatible"),
                (("size", ("3 ft", "6 ft", "10 ft", "15 ft")),), 0.42, (6, 30)),
    ProductType("electronics", "power bank", ("Cell Phones & Accessories", "Chargers & Power Adapters", "Portable Power Banks"), "Power Bank",
                ("fast charging", "10000mah capacity", "led display", "usb c port", "compact design", "dual output",
                 "travel friendly", "wireless charging", "high capacity", "overcharge protection", "slim design", "airline approved"),
                (("color", ("black", "white", "blue")),), 0.28, (15, 70)),
    ProductType("electronics", "tv wall mount", ("Electronics", "Television & Video", "Accessories", "TV Mounts, Stands & Turntables", "TV Wall & Ceiling Mounts"), "TV Wall Mount",
                ("full motion", "tilt and swivel", "heavy duty", "easy installation", "vesa compatible", "cable management",
                 "low profile", "steel construction", "articulating arm", "fits most tvs", "stud mounting", "weight capacity"),
                (("size", ("26 to 55 inch", "37 to 70 inch", "42 to 85 inch")),), 0.35, (20, 110)),
    ProductType("electronics", "wireless mouse", ("Electronics", "Computers & Accessories", "Computer Accessories & Peripherals", "Keyboards, Mice & Accessories", "Mice"), "Wireless Mouse",
                ("ergonomic design", "silent click", "usb receiver", "long battery life", "adjustable dpi", "rechargeable battery",
                 "bluetooth connection", "plug and play", "compact design", "precise tracking", "office use", "left handed"),
                (("color", ("black", "white", "gray", "pink")),), 0.39, (9, 60)),
    ProductType("electronics", "screen protector", ("Cell Phones & Accessories", "Accessories", "Screen Protectors"), "Screen Protector",
                ("tempered glass", "bubble free", "case friendly", "anti glare", "easy installation", "9h hardness",
                 "high definition", "scratch resistant", "privacy filter", "anti fingerprint", "installation frame", "full coverage"),
                (("style", ("iphone 14", "iphone 15", "galaxy s23")), ("count", ("2 pack", "3 pack"))), 0.56, (5, 20)),
    # ------------------------------------------------------------------ fashion
    ProductType("fashion", "women's running shoes", ("Clothing, Shoes & Jewelry", "Women", "Shoes", "Athletic", "Running"), "Women's Running Shoes",
                ("breathable mesh", "non slip", "arch support", "lightweight design", "memory foam", "rubber sole",
                 "cushioned insole", "slip on", "walking shoes", "gym workout", "machine washable", "wide toe box"),
                (("color", ("black", "white", "pink", "gray", "navy blue")), ("size", _SHOE_SIZES)), 0.66, (25, 110)),
    ProductType("fashion", "men's dress shirt", ("Clothing, Shoes & Jewelry", "Men", "Clothing", "Shirts", "Dress Shirts"), "Men's Dress Shirt",
                ("slim fit", "wrinkle free", "long sleeve", "button down", "machine wash", "cotton blend",
                 "regular fit", "stretch fabric", "easy care", "spread collar", "business casual", "short sleeve"),
                (("color", _CLOTH_COLORS), ("size", _FASHION_SIZES)), 0.66, (18, 65)),
    ProductType("fashion", "women's hoodies & sweatshirts", ("Clothing, Shoes & Jewelry", "Women", "Clothing", "Fashion Hoodies & Sweatshirts"), "Women's Hoodie",
                ("machine wash", "long sleeve", "fleece lined", "drawstring hood", "kangaroo pocket", "loose fit",
                 "cotton blend", "oversized fit", "pullover style", "tumble dry", "soft fabric", "zip up"),
                (("color", _CLOTH_COLORS), ("size", _FASHION_SIZES)), 0.66, (15, 60)),
    ProductType("fashion", "men's jeans", ("Clothing, Shoes & Jewelry", "Men", "Clothing", "Jeans"), "Men's Jeans",
                ("slim fit", "straight leg", "stretch denim", "machine wash", "button fly", "relaxed fit",
                 "classic five pocket", "zipper fly", "regular fit", "distressed look", "bootcut leg", "cotton blend"),
                (("color", ("dark indigo", "light blue", "black", "stone gray")), ("size", ("30w x 30l", "32w x 32l", "34w x 32l", "36w x 34l"))), 0.66, (22, 80)),
    ProductType("fashion", "women's dresses", ("Clothing, Shoes & Jewelry", "Women", "Clothing", "Dresses", "Casual"), "Women's Dress",
                ("short sleeve", "a line", "knee length", "hand wash", "v neck", "floral print", "maxi length",
                 "casual summer", "flowy skirt", "wrap style", "elastic waist", "with pockets"),
                (("color", _CLOTH_COLORS), ("size", _FASHION_SIZES)), 0.66, (20, 70)),
    ProductType("fashion", "men's socks", ("Clothing, Shoes & Jewelry", "Men", "Clothing", "Socks", "Athletic Socks"), "Men's Socks",
                ("moisture wicking", "cushioned sole", "crew length", "arch support", "breathable cotton", "ankle length",
                 "machine wash", "no show", "athletic performance", "odor control", "reinforced heel", "non slip"),
                (("color", ("black", "white", "gray", "assorted")), ("size", ("pack of 6", "pack of 10", "pack of 12"))), 0.59, (9, 30)),
    ProductType("fashion", "women's leggings", ("Clothing, Shoes & Jewelry", "Women", "Clothing", "Active", "Leggings"), "Women's Leggings",
                ("high waist", "tummy control", "squat proof", "four way stretch", "yoga pants", "moisture wicking",
                 "side pockets", "buttery soft", "machine wash", "workout running", "full length", "capri length"),
                (("color", ("black", "navy blue", "olive green", "charcoal", "burgundy")), ("size", ("small", "medium", "large", "x-large"))), 0.66, (12, 45)),
    ProductType("fashion", "baseball cap", ("Clothing, Shoes & Jewelry", "Men", "Accessories", "Hats & Caps", "Baseball Caps"), "Baseball Cap",
                ("adjustable strap", "cotton twill", "low profile", "sun protection", "unstructured design", "breathable fabric",
                 "embroidered logo", "curved brim", "washed cotton", "one size", "outdoor sports", "trucker style"),
                (("color", ("black", "khaki", "navy blue", "red", "white")),), 0.49, (8, 30)),
    ProductType("fashion", "men's boots", ("Clothing, Shoes & Jewelry", "Men", "Shoes", "Boots"), "Men's Boots",
                ("waterproof leather", "steel toe", "slip resistant", "lace up", "rubber sole", "ankle boots",
                 "work boots", "cushioned insole", "durable leather", "chelsea style", "combat boots", "winter boots"),
                (("color", ("brown", "black", "tan")), ("size", ("8", "9", "10", "11", "12"))), 0.66, (40, 180)),
    # ------------------------------------------------------------------ garden (home & kitchen, patio)
    ProductType("garden", "throw pillow covers", ("Home & Kitchen", "Bedding", "Decorative Pillows, Inserts & Covers", "Throw Pillow Covers"), "Throw Pillow Cover",
                ("living room", "hand painted", "set of 2", "hidden zipper", "machine washable", "linen fabric",
                 "velvet fabric", "farmhouse style", "boho decor", "double sided", "square shape", "soft touch"),
                (("color", _HOME_COLORS), ("size", ("16x16 inch", "18x18 inch", "20x20 inch"))), 0.59, (9, 35)),
    ProductType("garden", "shower curtain", ("Home & Kitchen", "Bath", "Shower Curtains, Hooks & Liners", "Shower Curtains"), "Shower Curtain",
                ("water repellent", "machine washable", "hooks included", "fabric curtain", "mildew resistant", "weighted hem",
                 "bathroom decor", "extra long", "farmhouse style", "quick drying", "floral pattern", "waffle weave"),
                (("color", _HOME_COLORS),), 0.45, (10, 40)),
    ProductType("garden", "bed sheet set", ("Home & Kitchen", "Bedding", "Sheets & Pillowcases", "Sheet & Pillowcase Sets"), "Bed Sheet Set",
                ("deep pocket", "microfiber fabric", "wrinkle free", "breathable cotton", "fade resistant", "machine washable",
                 "hypoallergenic", "egyptian cotton", "cooling sheets", "soft touch", "4 piece set", "bamboo fabric"),
                (("color", _HOME_COLORS), ("size", ("twin", "full", "queen", "king"))), 0.63, (20, 90)),
    ProductType("garden", "area rug", ("Home & Kitchen", "Home Decor", "Area Rugs, Runners & Pads", "Area Rugs"), "Area Rug",
                ("non slip", "living room", "machine washable", "low pile", "stain resistant", "shag rug",
                 "bedroom decor", "easy to clean", "boho style", "soft touch", "indoor outdoor", "geometric pattern"),
                (("color", _HOME_COLORS), ("size", ("2x3 ft", "4x6 ft", "5x7 ft", "8x10 ft"))), 0.63, (20, 160)),
    ProductType("garden", "wall clock", ("Home & Kitchen", "Home Decor", "Clocks", "Wall Clocks"), "Wall Clock",
                ("silent movement", "battery operated", "living room", "large numbers", "modern design", "wooden frame",
                 "easy to read", "non ticking", "farmhouse style", "metal frame", "kitchen decor", "glass cover"),
                (("color", ("black", "white", "gold", "walnut")),), 0.35, (12, 60)),
    ProductType("garden", "led desk lamp", ("Tools & Home Improvement", "Lighting & Ceiling Fans", "Lamps & Shades", "Desk Lamps"), "LED Desk Lamp",
                ("eye caring", "dimmable light", "touch control", "usb charging port", "adjustable arm", "energy efficient",
                 "reading lamp", "color temperature", "memory function", "office use", "flexible gooseneck", "auto timer"),
                (("color", ("black", "white", "silver")),), 0.35, (15, 70)),
    ProductType("garden", "storage baskets", ("Home & Kitchen", "Storage & Organization", "Baskets, Bins & Containers", "Storage Baskets"), "Storage Basket",
                ("woven design", "foldable design", "with handles", "cotton rope", "set of 3", "closet organizer",
                 "nursery storage", "sturdy structure", "laundry basket", "water hyacinth", "decorative bins", "collapsible"),
                (("color", ("natural", "white", "gray", "black")),), 0.35, (12, 55)),
    ProductType("garden", "garden hose", ("Patio, Lawn & Garden", "Watering Equipment", "Garden Hoses"), "Garden Hose",
                ("expandable hose", "leak proof", "kink free", "lightweight design", "brass fittings", "spray nozzle",
                 "heavy duty", "flexible hose", "outdoor use", "easy storage", "uv resistant", "burst resistant"),
                (("size", ("25 ft", "50 ft", "75 ft", "100 ft")),), 0.49, (15, 75)),
    # ------------------------------------------------------------------ grocery
    ProductType("grocery", "ground coffee", ("Grocery & Gourmet Food", "Beverages", "Coffee, Tea & Cocoa", "Coffee", "Ground Coffee"), "Ground Coffee",
                ("100% arabica", "medium roast", "fair trade", "usda organic", "rich flavor", "small batch",
                 "kosher certified", "smooth taste", "whole bean", "low acid", "single origin", "bold taste"),
                (("flavor name", ("dark roast", "light roast", "french vanilla", "hazelnut", "decaf")), ("size", ("12 ounce", "2 pound"))), 0.49, (8, 35)),
    ProductType("grocery", "green tea", ("Grocery & Gourmet Food", "Beverages", "Coffee, Tea & Cocoa", "Tea", "Green"), "Green Tea",
                ("caffeine free", "usda organic", "tea bags", "loose leaf", "antioxidant rich", "non gmo",
                 "natural flavor", "gluten free", "matcha powder", "kosher certified", "sugar free", "individually wrapped"),
                (("flavor name", ("jasmine", "lemon", "mint", "honey ginseng", "original")), ("size", ("20 count", "50 count", "100 count"))), 0.52, (5, 30)),
    ProductType("grocery", "protein bars", ("Grocery & Gourmet Food", "Snack Foods", "Bars", "Protein Bars"), "Protein Bar",
                ("high protein", "gluten free", "low sugar", "keto friendly", "non gmo", "plant based",
                 "individually wrapped", "no artificial sweeteners", "whey protein", "soy free", "meal replacement", "dairy free"),
                (("flavor name", ("chocolate chip", "peanut butter", "cookies and cream", "salted caramel", "cinnamon")), ("size", _PACKS)), 0.56, (10, 45)),
    ProductType("grocery", "beef jerky", ("Grocery & Gourmet Food", "Snack Foods", "Jerky & Dried Meats", "Beef Jerky"), "Beef Jerky",
                ("high protein", "grass fed", "gluten free", "low fat", "no msg", "natural ingredients",
                 "resealable bag", "keto friendly", "small batch", "premium quality", "low carb", "hand sliced"),
                (("flavor name", ("original", "teriyaki", "sweet and spicy", "black pepper", "honey bbq")), ("size", ("3.25 ounce", "10 ounce", "16 ounce"))), 0.52, (7, 40)),
    ProductType("grocery", "olive oil", ("Grocery & Gourmet Food", "Pantry Staples", "Cooking & Baking", "Oils", "Olive"), "Olive Oil",
                ("extra virgin", "cold pressed", "first cold pressed", "non gmo", "kosher certified", "glass bottle",
                 "usda organic", "single origin", "rich flavor", "high polyphenol", "unfiltered", "imported from italy"),
                (("size", ("16.9 fl oz", "25.5 fl oz", "33.8 fl oz", "68 fl oz")),), 0.42, (9, 50)),
    ProductType("grocery", "dark chocolate", ("Grocery & Gourmet Food", "Candy & Chocolate", "Chocolate", "Chocolate Bars"), "Dark Chocolate Bar",
                ("72% cacao", "fair trade", "usda organic", "non gmo", "dairy free", "gluten free",
                 "low sugar", "vegan", "individually wrapped", "rich flavor", "gift box", "single origin"),
                (("flavor name", ("sea salt", "almond", "orange", "raspberry", "espresso")), ("size", ("pack of 4", "pack of 8", "pack of 12"))), 0.49, (5, 35)),
    ProductType("grocery", "trail mix", ("Grocery & Gourmet Food", "Snack Foods", "Trail Mix"), "Trail Mix",
                ("roasted nuts", "dried fruit", "gluten free", "non gmo", "high protein", "resealable bag",
                 "individually wrapped", "healthy snack", "no artificial flavors", "kosher certified", "family size", "low sodium"),
                (("flavor name", ("classic", "tropical", "chocolate", "sweet and salty")), ("size", ("pack of 6", "pack of 12", "pack of 24"))), 0.49, (6, 30)),
)

BRAND_SYLLABLES = (
    "lu", "mo", "ra", "ve", "ka", "zen", "tor", "bri", "sa", "no", "fi", "del", "qua", "vi", "ro", "ny",
    "ar", "el", "ta", "mi", "ko", "pla", "sel", "tu", "ber", "ga", "li", "dor", "ex", "fen", "ju", "ori",
)

# Neutral sentences that pad descriptions and bullets (no attribute phrases in them).
FILLERS = (
    "Designed for everyday use at home or on the go.",
    "Backed by our friendly customer support team.",
    "Makes a thoughtful gift for friends and family.",
    "Carefully inspected before it leaves our warehouse.",
    "Simple to use straight out of the box.",
    "Made to the same standard as our best sellers.",
    "Loved by thousands of happy customers.",
    "Ships in recyclable packaging.",
)
