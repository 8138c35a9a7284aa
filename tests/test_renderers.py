"""Pictures of the games: rgb_array frames, the human window, GIF/MP4 export, `ragen render`."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import DependencyNotInstalled, ResetNeeded
from gymnasium.utils.env_checker import check_env

import ragen_envs
from ragen_envs.agents import make_agent
from ragen_envs.cli import main

ENV_IDS = [s.id for s in ragen_envs.ENV_SPECS]
HAS_PYGAME = importlib.util.find_spec("pygame") is not None
HAS_PIL = importlib.util.find_spec("PIL") is not None
needs_pygame = pytest.mark.skipif(not HAS_PYGAME, reason='needs pygame-ce: pip install "ragen-envs[render]"')
needs_gif = pytest.mark.skipif(not (HAS_PYGAME and HAS_PIL), reason='needs pygame-ce and Pillow: pip install "ragen-envs[render]"')


def _colours(frame: np.ndarray) -> int:
    return len(np.unique(frame.reshape(-1, 3), axis=0))


def _cell(frame: np.ndarray, r: int, c: int, tile: int) -> np.ndarray:
    return frame[r * tile : (r + 1) * tile, c * tile : (c + 1) * tile]


def _expert_reply(env) -> str:
    return make_agent("expert", env=env).act([])


def _gif_frames(path) -> tuple[int, tuple[int, int], list[np.ndarray]]:
    from PIL import Image, ImageSequence

    with Image.open(path) as im:
        frames = [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(im)]
        return im.n_frames, im.size, frames


# --------------------------------------------------------------------------- no pygame at import
def test_import_and_make_do_not_load_pygame():
    code = (
        "import sys, gymnasium as gym, ragen_envs, renderers\n"
        "env = gym.make('ragen/Sokoban-v0', render_mode='rgb_array'); env.reset(seed=1)\n"
        "env.step('<answer>Up</answer>'); env.close()\n"
        "assert 'pygame' not in sys.modules, 'pygame was imported'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_missing_pygame_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pygame", None)  # makes `import pygame` fail
    env = gym.make("ragen/Sokoban-v0", render_mode="rgb_array")
    env.reset(seed=123)
    with pytest.raises(DependencyNotInstalled, match=r'pip install "ragen-envs\[render\]"'):
        env.render()
    env.close()
    from renderers import bandit, frozenlake

    with pytest.raises(DependencyNotInstalled, match="pygame-ce"):
        bandit.draw(("A", "B"), None)
    with pytest.raises(DependencyNotInstalled, match="ragen-envs"):
        frozenlake.draw(["SF", "FG"], (0, 0))


def test_missing_pygame_in_the_cli(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "pygame", None)
    assert main(["render", "ragen/Bandit-v0", "--out", str(tmp_path / "b.gif")]) == 2
    err = capsys.readouterr().err
    assert 'pip install "ragen-envs[render]"' in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- env integration
def test_render_modes_are_declared():
    for env_id in ENV_IDS:
        env = gym.make(env_id)
        assert env.metadata["render_modes"] == ["ansi", "rgb_array", "human"]
        assert env.metadata["render_fps"] == 4
        env.close()


def test_render_before_reset_is_a_clear_error():
    env = gym.make("ragen/FrozenLake-v0", render_mode="rgb_array").unwrapped
    with pytest.raises(ResetNeeded, match="reset"):
        env.render()


@needs_pygame
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_with_rgb_array(env_id):
    # check_env renders this env, then makes one env per declared mode (human included) from
    # the spec, resets and renders it; any Gymnasium warning fails the test.
    env = gym.make(env_id, render_mode="rgb_array")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=False)
    env.close()


@needs_pygame
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_rgb_array_frames_are_pictures(env_id):
    env = gym.make(env_id, render_mode="rgb_array")
    env.reset(seed=123)
    frame = env.render()
    assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8
    assert frame.ndim == 3 and frame.shape[2] == 3
    assert frame.shape[0] >= 128 and frame.shape[1] >= 128
    assert frame.shape[0] % 16 == 0 and frame.shape[1] % 16 == 0  # video encoders like this
    assert _colours(frame) > 50  # shaded drawings, not a flat fill
    again = env.render()
    assert again is not frame and np.array_equal(again, frame)  # deterministic, fresh array
    other = gym.make(env_id, render_mode="rgb_array")
    other.reset(seed=123)
    assert np.array_equal(other.render(), frame)  # a function of the state only
    env.close()
    other.close()


@needs_pygame
def test_sokoban_frame_changes_where_the_box_moved():
    env = gym.make("ragen/Sokoban-v0", render_mode="rgb_array")
    env.reset(seed=123)
    base = env.unwrapped
    before_codes, before = base.game.grid_codes(), env.render()
    env.step("<think>x</think><answer>nonsense</answer>")  # nothing runs: same picture
    assert np.array_equal(env.render(), before)
    env.step(_expert_reply(env))
    after_codes, after = base.game.grid_codes(), env.render()
    assert not np.array_equal(before, after)
    tile = before.shape[0] // before_codes.shape[0]
    boxes_before = set(zip(*np.nonzero(np.isin(before_codes, (3, 4)))))
    boxes_after = set(zip(*np.nonzero(np.isin(after_codes, (3, 4)))))
    assert boxes_before != boxes_after
    for r, c in boxes_before ^ boxes_after:
        assert not np.array_equal(_cell(before, r, c, tile), _cell(after, r, c, tile)), (r, c)
    unchanged = [(r, c) for r in range(after_codes.shape[0]) for c in range(after_codes.shape[1]) if before_codes[r, c] == after_codes[r, c] == 0]
    for r, c in unchanged:  # walls far from the action stay put
        if all(before_codes[rr, cc] == 0 for rr in range(max(r - 1, 0), min(r + 2, after_codes.shape[0])) for cc in range(max(c - 1, 0), min(c + 2, after_codes.shape[1]))):
            assert np.array_equal(_cell(before, r, c, tile), _cell(after, r, c, tile))
    env.close()


@needs_pygame
def test_sokoban_cell_kinds_all_look_different():
    from renderers import sokoban

    codes = np.zeros((3, 9), dtype=np.int64)
    codes[1, 1:8] = [1, 2, 3, 4, 5, 6, 1]
    frame = sokoban.draw(codes)
    t = sokoban.TILE
    assert frame.shape == (3 * t, 9 * t, 3)
    cells = [_cell(frame, 1, c, t) for c in range(1, 8)]
    for i in range(7):
        for j in range(i + 1, 7):
            if {i, j} == {0, 6}:
                continue  # two plain floor cells
            assert not np.array_equal(cells[i], cells[j]), (i, j)
    box, box_on_target = cells[3].reshape(-1, 3).mean(0), cells[2].reshape(-1, 3).mean(0)
    assert box[0] > box[1]  # wooden: red over green
    assert box_on_target[1] > box_on_target[0]  # green tint once on a target


@needs_pygame
def test_frozenlake_fallen_and_arrived_are_drawn_distinctly():
    from renderers import frozenlake

    desc = np.array([list("SFFF"), list("FHFH"), list("FFFH"), list("HFFG")])
    t = frozenlake.TILE
    normal = frozenlake.draw(desc, (0, 1))
    fallen = frozenlake.draw(desc, (1, 1))
    arrived = frozenlake.draw(desc, (3, 3))
    assert normal.shape == fallen.shape == arrived.shape == (4 * t, 4 * t, 3)
    hole, hole_fallen = _cell(normal, 1, 1, t), _cell(fallen, 1, 1, t)
    goal, goal_arrived = _cell(normal, 3, 3, t), _cell(arrived, 3, 3, t)
    assert not np.array_equal(hole, hole_fallen) and not np.array_equal(goal, goal_arrived)

    def share(cell, test):
        px = cell.reshape(-1, 3).astype(int)
        return float(np.mean(test(px[:, 0], px[:, 1], px[:, 2])))

    def red(r, g, b):
        return (r > 180) & (g < 90) & (b < 90)

    def gold(r, g, b):
        return (r > 200) & (g > 150) & (b < 110)

    assert share(hole_fallen, red) > 0.08 and share(hole, red) == 0.0  # red alarm frame
    assert share(goal_arrived, gold) > 0.08 and share(goal, gold) < 0.01  # gold frame and glow
    # the player on plain ice looks like neither
    player = _cell(normal, 0, 1, t)
    assert share(player, red) < 0.08 and share(player, gold) < 0.08


@needs_pygame
def test_frozenlake_env_frame_follows_the_player():
    env = gym.make("ragen/FrozenLake-v0", render_mode="rgb_array", slippery=False)
    env.reset(seed=3)
    base = env.unwrapped
    start, first = base.game.position, env.render()
    env.step(_expert_reply(env))
    assert base.game.position != start
    assert not np.array_equal(env.render(), first)
    env.close()


@needs_pygame
def test_bandit_frame_changes_after_the_pull():
    from renderers import bandit

    env = gym.make("ragen/Bandit-v0", render_mode="rgb_array")
    env.reset(seed=123)
    before = env.render()
    env.step(_expert_reply(env))
    after = env.render()
    assert before.shape == after.shape == (bandit.SIZE[1], bandit.SIZE[0], 3)
    assert not np.array_equal(before, after)
    env.close()
    names = ("Phoenix", "Dragon")
    pulls = [None, (0, 0.15), (1, 1.0), (1, 0.0)]
    frames = [bandit.draw(names, p) for p in pulls]
    for i in range(len(frames)):
        for j in range(i + 1, len(frames)):
            assert not np.array_equal(frames[i], frames[j]), (pulls[i], pulls[j])
    # both halves change: the pulled machine lights up, the other one dims
    half = bandit.SIZE[0] // 2
    for pulled in (frames[1], frames[2]):
        assert not np.array_equal(pulled[:, :half], frames[0][:, :half])
        assert not np.array_equal(pulled[:, half:], frames[0][:, half:])


@needs_pygame
def test_renderers_reject_bad_input():
    from renderers import bandit, frozenlake, sokoban

    with pytest.raises(ValueError, match="0..6"):
        sokoban.draw(np.array([[0, 9]]))
    with pytest.raises(ValueError, match="2-D"):
        sokoban.draw(np.zeros(4, dtype=int))
    with pytest.raises(ValueError, match="outside"):
        frozenlake.draw(["SF", "FG"], (2, 0))
    with pytest.raises(ValueError, match="S', 'F', 'H', 'G'"):
        frozenlake.draw(["SX", "FG"], (0, 0))
    with pytest.raises(ValueError, match="arm 0 or 1"):
        bandit.draw(("A", "B"), (2, 1.0))
    with pytest.raises(ValueError, match="pair"):
        bandit.draw("AB", None)
    long = bandit.draw(("An extremely long and unusual arm name that cannot fit", "B\x00"), (0, 0.5))
    assert long.shape == (bandit.SIZE[1], bandit.SIZE[0], 3)


@needs_pygame
def test_human_mode_opens_and_closes_a_window():
    import pygame

    env = gym.make("ragen/Sokoban-v0", render_mode="human")
    env.reset(seed=123)  # human mode draws on reset and step by itself
    surface = pygame.display.get_surface()
    assert surface is not None and surface.get_size() == (384, 384)
    assert env.render() is None
    env.step("<think>x</think><answer>Up</answer>")
    env.close()
    assert not pygame.display.get_init()
    env.close()  # twice is fine


@needs_pygame
def test_window_stops_showing_after_the_user_closes_it():
    import pygame

    from renderers.window import Window

    window = Window("test", fps=1000)
    frame = np.zeros((32, 48, 3), dtype=np.uint8)
    window.show(frame)
    assert window.is_open
    pygame.event.post(pygame.event.Event(pygame.QUIT))
    window.show(frame)
    assert window.closed_by_user and not window.is_open
    window.show(frame)  # ignored, no error
    assert not window.is_open
    with pytest.raises(ValueError, match="uint8"):
        Window().show(np.zeros((4, 4, 3), dtype=np.float32))


@needs_pygame
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_record_video_works(env_id, tmp_path):
    pytest.importorskip("moviepy", reason="gymnasium's RecordVideo needs moviepy")
    from gymnasium.wrappers import RecordVideo

    folder = tmp_path / "videos"  # a new folder: RecordVideo warns about existing ones
    env = RecordVideo(gym.make(env_id, render_mode="rgb_array"), str(folder), episode_trigger=lambda e: True, name_prefix="ep")
    env.reset(seed=123)
    terminated = truncated = False
    for _ in range(40):  # every episode of the short games; 2048's runs to 700 moves: its first 40 make the video
        _, _, terminated, truncated, _ = env.step(_expert_reply(env))
        if terminated or truncated:
            break
    env.close()
    videos = sorted(p for p in os.listdir(folder) if p.endswith(".mp4"))
    assert videos == ["ep-episode-0.mp4"]
    assert (folder / videos[0]).stat().st_size > 1000


# --------------------------------------------------------------------------- export
def _episode_frames(env_id="ragen/FrozenLake-v0", seed=123):
    env = gym.make(env_id, render_mode="rgb_array", slippery=False) if "Frozen" in env_id else gym.make(env_id, render_mode="rgb_array")
    env.reset(seed=seed)
    frames = [env.render()]
    for reply in ("<answer>Up</answer>", "<answer>Left</answer>", "<answer>Down</answer>", "<answer>Right</answer>"):
        _, _, term, trunc, _ = env.step("<think>t</think>" + reply)
        frames.append(env.render())
        if term or trunc:
            break
    env.close()
    return frames


@needs_pygame
def test_caption_adds_a_band_of_wrapped_text():
    from renderers.export import caption, caption_frames

    frame = np.full((64, 160, 3), 200, dtype=np.uint8)
    short = caption(frame, "Turn 1: Up")
    assert short.shape[1] == 160 and short.shape[0] > 64 and short.shape[0] % 16 == 0
    assert np.array_equal(short[:64], frame)  # the picture itself is untouched
    assert _colours(short[64:]) > 5  # text drawn in the band
    long = caption(frame, "Turn 2: " + " || ".join(["Left", "Down", "Right", "Up"] * 3))
    assert long.shape[0] > short.shape[0]  # wrapped onto more lines
    capped = caption(frame, "word " * 500, max_lines=2)
    assert capped.shape[0] <= caption(frame, "a\nb", min_lines=2).shape[0]
    same = caption_frames([frame, frame], ["a", "a much longer caption " * 4])
    assert same[0].shape == same[1].shape
    with pytest.raises(ValueError, match="one caption per frame"):
        caption_frames([frame], ["a", "b"])


@needs_gif
def test_gif_round_trip(tmp_path):
    from renderers.export import save_gif

    frames = _episode_frames()
    assert len(frames) >= 3
    path = save_gif(frames, tmp_path / "ep.gif", fps=4)
    n, size, read = _gif_frames(path)
    assert n == len(frames) and size == (frames[0].shape[1], frames[0].shape[0])
    for a, b in zip(read, frames):
        assert np.abs(a.astype(int) - b).mean() < 3  # palette quantisation only

    captions = [f"Turn {k}: answer {k}" for k in range(len(frames))]
    path = save_gif(frames, tmp_path / "captioned.gif", captions=captions, fps=2)
    n, size, read = _gif_frames(path)
    assert n == len(frames) and size[1] > frames[0].shape[0]
    from PIL import Image

    with Image.open(path) as im:
        assert im.info["duration"] == 500 and im.info.get("loop") == 0


@needs_gif
def test_export_rejects_bad_input(tmp_path):
    from renderers.export import save_frames, save_gif

    frame = np.zeros((32, 32, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="no frames"):
        save_gif([], tmp_path / "a.gif")
    with pytest.raises(ValueError, match="uint8"):
        save_gif([frame.astype(float)], tmp_path / "a.gif")
    with pytest.raises(ValueError, match="same size"):
        save_gif([frame, np.zeros((16, 32, 3), dtype=np.uint8)], tmp_path / "a.gif")
    with pytest.raises(ValueError, match="fps"):
        save_gif([frame], tmp_path / "a.gif", fps=0)
    with pytest.raises(ValueError, match="single image"):
        save_gif(frame, tmp_path / "a.gif")
    with pytest.raises(ValueError, match=r"\.gif, \.mp4"):
        save_frames([frame], tmp_path / "a.png")


@needs_pygame
def test_mp4_round_trip(tmp_path):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    from renderers.export import save_mp4

    frames = _episode_frames()
    path = save_mp4(frames, tmp_path / "ep.mp4", captions=[f"Turn {k}" for k in range(len(frames))], fps=2)
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    assert sum(1 for _ in reader) == len(frames)
    assert meta["size"][0] == frames[0].shape[1]


def test_mp4_without_imageio_ffmpeg_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)
    from renderers.export import save_mp4

    with pytest.raises(DependencyNotInstalled, match="pip install imageio-ffmpeg"):
        save_mp4([np.zeros((16, 16, 3), dtype=np.uint8)], tmp_path / "a.mp4")


# --------------------------------------------------------------------------- ragen render
@needs_gif
@pytest.mark.parametrize("env_id", ["ragen/Sokoban-v0", "ragen/Bandit-v0"])
def test_cli_render_writes_a_gif(env_id, tmp_path, capsys):
    out = tmp_path / "sub" / "ep.gif"
    assert main(["render", env_id, "--seed", "123", "--agent", "expert", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "success" in printed
    n, size, _ = _gif_frames(out)
    env = gym.make(env_id)
    turns = 0
    env.reset(seed=123)
    done = False
    while not done:
        _, _, term, trunc, _ = env.step(_expert_reply(env))
        turns += 1
        done = term or trunc
    assert n == turns + 1  # the start, then one frame per turn


@needs_gif
def test_cli_render_random_agent_and_fps(tmp_path):
    out = tmp_path / "lake.gif"
    assert main(["render", "ragen/FrozenLake-v0", "--seed", "7", "--agent", "random", "--out", str(out), "--fps", "1"]) == 0
    from PIL import Image

    with Image.open(out) as im:
        assert im.n_frames >= 2 and im.info["duration"] == 1000


@needs_pygame
def test_cli_render_mp4(tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    out = tmp_path / "ep.mp4"
    assert main(["render", "ragen/LargeSokoban-v0", "--seed", "123", "--out", str(out)]) == 0
    assert out.stat().st_size > 1000


@pytest.mark.parametrize(
    "argv, message",
    [
        (["render", "ragen/Nope-v0", "--out", "x.gif"], "unknown environment"),
        (["render", "ragen/Sokoban-v0", "--out", "x.png"], "--out must end in .gif or .mp4"),
        (["render", "ragen/Sokoban-v0", "--out", "x.gif", "--agent", "gpt-9"], "unknown agent 'gpt-9'"),
        (["render", "ragen/Sokoban-v0", "--out", "x.gif", "--seed", "-1"], "--seed must be >= 0"),
        (["render", "ragen/Sokoban-v0", "--out", "x.gif", "--fps", "0"], "--fps must be > 0"),
    ],
)
def test_cli_render_errors_are_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.gif").exists()
