"""``report.html``: one self-contained page (no network) for a run.

The summary table, a success chart (inline SVG, 95 % Wilson intervals as whiskers), the
comparison table when other runs are given, the episodes that ended in errors, and a
trajectory viewer: pick an env and a seed, step through the turns and see the state the
model saw (a PNG frame when rendering is available, else the text grid), its think text,
its answer, the actions run and the reward. ``#env=ragen/Sokoban-v0&seed=124&turn=2`` in the
URL opens that turn (``turn=end`` the final state).

A Content-Security-Policy forbids every fetch: styles, script and images are inline.
"""

from __future__ import annotations

import html
import json
from typing import Any, Sequence

from ..protocol import Episode
from .frames import EpisodeReplayer
from .tables import context_window_label, num, pct, summary_rows

__all__ = ["render_report", "success_chart_svg", "summary_csv", "compare_csv"]

_MAX_TEXT = 8000  # characters kept per text field in the page
COLORS = ("#3366cc", "#dc7633", "#2e8b57", "#8e44ad", "#c0392b")


def _clip(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + f"\n... [{len(text) - _MAX_TEXT} more characters]"


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _pct(x: float | None, digits: int = 1) -> str:
    return pct(x, digits, "–")


def _num(x: float | None, digits: int = 2) -> str:
    return num(x, digits, "–")


# The summary CSV: (column, summary key); the CI bounds and the token / cost columns are added in summary_csv.
_CSV_COLUMNS = (("episodes", "episodes"), ("successes", "successes"), ("success_rate", "success_rate"),
                ("mean_return", "mean_return"), ("action_is_effective", "mean_action_is_effective"),
                ("action_is_valid", "mean_action_is_valid"), ("format_error", "mean_format_error"),
                ("reasoning_score", "reasoning_score"), ("actions_agree", "actions_agree"),
                ("claims_true_rate", "claims_true_rate"), ("mean_turns", "mean_turns"), ("mean_actions", "mean_actions"),
                ("errors", "errors"), ("mean_response_tokens_per_turn", "mean_response_tokens_per_turn"),
                ("mean_response_tokens", "mean_response_tokens"), ("prompt_tokens", "prompt_tokens"),
                ("completion_tokens", "completion_tokens"), ("cost_usd", "cost_usd"))


def _csv(rows: Sequence[Sequence[Any]]) -> str:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


def summary_csv(summary: dict[str, Any]) -> str:
    """The summary table as CSV, one row per env, raw numbers (rates in [0, 1]; an unknown
    number, e.g. a check the agent does not produce, is an empty cell)."""
    envs = summary["envs"]
    head = ["env", "episodes", "successes", "success_rate", "success_ci95_low", "success_ci95_high"]
    head += [name for name, _ in _CSV_COLUMNS[3:]]
    rows = [head]
    for env_id, s in envs.items():
        lo, hi = s.get("success_ci95") or (None, None)
        rows.append([env_id, s.get("episodes", 0), s.get("successes"), s.get("success_rate"), lo, hi]
                    + [s.get(key) for _, key in _CSV_COLUMNS[3:]])
    return _csv(rows)


def compare_csv(runs: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """The comparison as CSV: per env, each run's success rate, CI and n, then each other
    run's difference to the first run (B − A, in [−1, 1])."""
    env_ids = _env_ids(runs)
    (label_a, _), others = runs[0], runs[1:]
    head = ["env"]
    for label, _ in runs:
        head += [f"{label} success_rate", f"{label} ci95_low", f"{label} ci95_high", f"{label} episodes"]
    head += [f"{label} − {label_a}" for label, _ in others]
    rows = [head]
    for env_id in env_ids:
        row: list[Any] = [env_id]
        for _, s in runs:
            e = s["envs"].get(env_id)
            if e and e.get("episodes"):
                row += [e["success_rate"], *(e.get("success_ci95") or (None, None)), e["episodes"]]
            else:
                row += [None, None, None, 0]
        row += [_diff(runs[0][1], s, env_id) for _, s in others]
        rows.append(row)
    return _csv(rows)


def _csv_link(text: str, filename: str) -> str:
    """A download link carrying ``text`` in a data: URI (the page stays self-contained)."""
    from urllib.parse import quote

    return (f'<a class="csv" download="{_esc(filename)}" href="data:text/csv;charset=utf-8,{quote(text, safe="")}">'
            f"download {_esc(filename)}</a>")


def _env_ids(runs: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    env_ids: list[str] = []
    for _, s in runs:
        env_ids += [e for e in s["envs"] if e not in env_ids]
    return env_ids


def _diff(a: dict[str, Any], b: dict[str, Any], env_id: str) -> float | None:
    """Success rate of run ``b`` minus run ``a`` on ``env_id`` (None when either has no episodes)."""
    ea, eb = a["envs"].get(env_id), b["envs"].get(env_id)
    if not (ea and eb and ea.get("episodes") and eb.get("episodes")):
        return None
    return eb["success_rate"] - ea["success_rate"]


def _summary_table(summary: dict[str, Any]) -> str:
    head, rows = summary_rows(summary, labels="long", dash="–")
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i == 0 else "n"}">{_esc(c)}</td>' for i, c in enumerate(cells)) + "</tr>"
        for cells in rows
    )
    thead = "".join(f"<th>{_esc(h)}</th>" for h in head)
    return (f'<div class="table-scroll"><table id="summary-table"><thead><tr>{thead}</tr></thead>'
            f'<tbody>{body}</tbody></table></div><p class="downloads">{_csv_link(summary_csv(summary), "summary.csv")}</p>')


def _compare_table(runs: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """Success % [95 % CI] per env and run, then one difference column per other run: that
    run's success minus the first run's (this run), in percentage points, headed "B − A"."""
    env_ids = _env_ids(runs)
    label_a = runs[0][0]
    head = "<th>env</th>" + "".join(f"<th>{_esc(label)}</th>" for label, _ in runs)
    head += "".join(f'<th class="diff" title="success of {_esc(label)} minus success of {_esc(label_a)}, percentage points">'
                    f"{_esc(label)} − {_esc(label_a)} (pp)</th>" for label, _ in runs[1:])
    rows = []
    for env_id in env_ids:
        cells = [f'<td class="l">{_esc(env_id)}</td>']
        for _, s in runs:
            e = s["envs"].get(env_id)
            if e and e.get("episodes") and e.get("success_ci95") is None:  # a published number, as printed
                cells.append(f'<td class="n">{_esc(e.get("published") or _pct(e["success_rate"], 2))}</td>')
            elif e and e.get("episodes"):
                lo, hi = e["success_ci95"]
                cells.append(f'<td class="n">{_pct(e["success_rate"])} <span class="ci">[{_pct(lo, 0)}–{_pct(hi, 0)}]</span></td>')
            else:
                cells.append('<td class="n">–</td>')
        for _, s in runs[1:]:
            d = _diff(runs[0][1], s, env_id)
            cells.append('<td class="n">–</td>' if d is None else f'<td class="n">{100 * d:+.1f}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="table-scroll"><table id="compare-table"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>'
            f'<p class="downloads">{_csv_link(compare_csv(runs), "compare.csv")}</p>')


def success_chart_svg(runs: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """Horizontal bars of success % per env (one bar per run), with 95 % CI whiskers."""
    env_ids: list[str] = []
    for _, s in runs:
        env_ids += [e for e in s["envs"] if e not in env_ids]
    label_w, plot_w, bar_h, gap = 210, 440, 16, 12
    group_h = bar_h * len(runs) + gap
    legend_h = 22 * len(runs) if len(runs) > 1 else 0
    height = 30 + group_h * len(env_ids) + 24 + legend_h
    width = label_w + plot_w + 70
    parts = [f'<svg id="success-chart" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="success rate per environment">']
    for tick in range(0, 101, 25):
        x = label_w + plot_w * tick / 100
        parts.append(f'<line x1="{x:.1f}" y1="20" x2="{x:.1f}" y2="{height - 24 - legend_h}" stroke="#ddd"/>')
        parts.append(f'<text x="{x:.1f}" y="14" font-size="11" text-anchor="middle" fill="#555">{tick}%</text>')
    for gi, env_id in enumerate(env_ids):
        y0 = 24 + gi * group_h
        parts.append(f'<text x="{label_w - 8}" y="{y0 + bar_h * len(runs) / 2 + 4:.1f}" font-size="12" '
                     f'text-anchor="end" fill="#222">{_esc(env_id)}</text>')
        for ri, (_, s) in enumerate(runs):
            e = s["envs"].get(env_id)
            y = y0 + ri * bar_h
            if not e or not e.get("episodes"):
                parts.append(f'<text x="{label_w + 4}" y="{y + bar_h - 4}" font-size="11" fill="#888">no episodes</text>')
                continue
            rate, ci = e["success_rate"], e.get("success_ci95")
            lo, hi = ci or (rate, rate)  # a published number has no CI: no whiskers
            w = plot_w * rate
            color = COLORS[ri % len(COLORS)]
            shown = f"{_pct(rate)}% ({_pct(lo)}–{_pct(hi)})" if ci else f"{e.get('published') or _pct(rate, 2)}% (published)"
            parts.append(f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{bar_h - 4}" fill="{color}">'
                         f'<title>{_esc(env_id)}: {_esc(shown)}</title></rect>')
            x1, x2, ym = label_w + plot_w * lo, label_w + plot_w * hi, y + bar_h / 2
            if ci:
                parts.append(f'<line x1="{x1:.1f}" y1="{ym:.1f}" x2="{x2:.1f}" y2="{ym:.1f}" stroke="#111" stroke-width="1.2"/>')
                for x in (x1, x2):
                    parts.append(f'<line x1="{x:.1f}" y1="{ym - 4:.1f}" x2="{x:.1f}" y2="{ym + 4:.1f}" stroke="#111" stroke-width="1.2"/>')
            parts.append(f'<text x="{label_w + plot_w * hi + 6:.1f}" y="{y + bar_h - 4}" font-size="11" fill="#222">'
                         f'{_pct(rate)}%</text>')
    if len(runs) > 1:
        for ri, (label, _) in enumerate(runs):
            y = height - legend_h + 22 * ri
            parts.append(f'<rect x="{label_w}" y="{y}" width="14" height="14" fill="{COLORS[ri % len(COLORS)]}"/>')
            parts.append(f'<text x="{label_w + 20}" y="{y + 11}" font-size="12" fill="#222">{_esc(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _errors_table(errors: Sequence[dict], summary: dict[str, Any]) -> str:
    rows = []
    for env_id, s in summary["envs"].items():
        for seed in s.get("error_seeds", []):
            reason = s.get("error_reasons", {}).get(str(seed), "")
            rows.append(f'<tr><td class="l">{_esc(env_id)}</td><td class="n">{seed}</td><td class="l">{_esc(reason)}</td></tr>')
    if not rows:
        return ""
    return ('<section id="errors"><h2>Episodes that ended in errors</h2><p>Not counted as failures of the '
            'model; running the same command again retries them.</p><table id="errors-table"><thead><tr>'
            '<th>env</th><th>seed</th><th>reason</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table></section>")


def _episode_data(ep: Episode, replay: dict[str, Any], frame_index: dict[str, int], frames: list[str]) -> dict:
    records = ep.meta.get("turns") or []
    turns = []
    for i, t in enumerate(ep.turns):
        rec = records[i] if i < len(records) else {}
        info = t.info
        usage = rec.get("usage") or {}
        turns.append({
            "obs": _clip(t.observation),
            "response": _clip(t.response),
            "raw": _clip(rec["raw_response"]) if rec.get("raw_response") not in (None, t.response) else None,
            "think": _clip(info.get("think", "")),
            "answer": _clip(info.get("answer", "")),
            "matched": bool(info.get("matched", False)),
            "format_ok": bool(info.get("format_ok", False)),
            "actions": list(info.get("actions", [])),
            "invalid": list(info.get("invalid_actions", [])),
            "reward": t.reward,
            "game_reward": float(info.get("game_reward", t.reward)),
            "penalty": float(info.get("format_penalty", 0.0)),
            "tokens": usage.get("completion_tokens"),
            "latency": rec.get("latency_s"),
            "attempts": rec.get("attempts"),
            "finish": rec.get("finish_reason"),
        })
    frame_ids = None
    if replay.get("frames"):
        frame_ids = []
        for uri in replay["frames"]:
            if uri not in frame_index:
                frame_index[uri] = len(frames)
                frames.append(uri)
            frame_ids.append(frame_index[uri])
    return {
        "env": ep.env_id, "seed": ep.seed, "noise_seed": ep.noise_seed, "success": ep.success,
        "return": ep.total_reward, "terminated": ep.terminated, "truncated": ep.truncated,
        "final_obs": _clip(ep.final_observation), "turns": turns,
        "states": [_clip(s) for s in replay.get("states", [])], "frames": frame_ids,
    }


def _json_for_script(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# Episodes longer than this get no PNG frames in the report (their text states stay): 16 framed
# 700-turn 2048 games made a 254 MB page that took minutes to render.
MAX_FRAMED_TURNS = 64


def render_report(
    summary: dict[str, Any],
    episodes: Sequence[Episode],
    errors: Sequence[dict] = (),
    compare: Sequence[tuple[str, dict[str, Any]]] = (),
    env_kwargs: dict[str, Any] | None = None,
    frame_episodes: int = 16,
    title: str | None = None,
) -> str:
    """The report page as one HTML string.

    ``frame_episodes`` bounds how many episodes per env get rendered PNG frames (the first
    ones by seed; the others show the text grid), to keep the page small; an episode of more
    than :data:`MAX_FRAMED_TURNS` turns (a 700-move 2048 game) shows the text grid only.
    """
    title = title or f"ragen eval: {summary.get('agent', '')}"
    runs = [(str(summary.get("agent", "this run")), summary)] + list(compare)
    replayer = EpisodeReplayer(env_kwargs)
    frames: list[str] = []
    frame_index: dict[str, int] = {}
    per_env: dict[str, int] = {}
    data_eps = []
    try:
        for ep in sorted(episodes, key=lambda e: (list(summary["envs"]).index(e.env_id) if e.env_id in summary["envs"] else 1 << 30,
                                                  e.seed, e.noise_seed or 0)):
            with_frames = per_env.get(ep.env_id, 0) < frame_episodes and len(ep.turns) <= MAX_FRAMED_TURNS
            replay = replayer.replay(ep, frames=with_frames)
            if replay.get("frames"):
                per_env[ep.env_id] = per_env.get(ep.env_id, 0) + 1
            data_eps.append(_episode_data(ep, replay, frame_index, frames))
    finally:
        replayer.close()
    data = {"envs": list(summary["envs"]), "episodes": data_eps, "frames": frames, "frame_episodes": frame_episodes}
    totals = summary.get("totals", {})
    meta = (f'{totals.get("episodes", 0)} finished episodes, {totals.get("errors", 0)} errors; '
            f'created {summary.get("created", "")}; ragen-envs {summary.get("ragen_envs_version", "")}, '
            f'protocol {summary.get("protocol_version", "")}')
    cost = totals.get("cost_usd")
    if cost is not None:
        meta += f"; cost {cost:.4f} USD"
    window = (summary.get("config") or {}).get("context_window")
    if isinstance(window, dict) and context_window_label(window.get("mode"), window.get("max_context_window")):
        meta += f"; context window {context_window_label(window.get('mode'), window.get('max_context_window'))}"
    compare_html = ""
    if compare:
        compare_html = ('<section id="compare"><h2>Comparison (success %, 95 % CI; last columns: other run − this run, percentage points)</h2>'
                        + _compare_table(runs) + "</section>")
    return (_PAGE
            .replace("%TITLE%", _esc(title))
            .replace("%META%", _esc(meta))
            .replace("%SUMMARY%", _summary_table(summary))
            .replace("%COMPARE%", compare_html)
            .replace("%CHART%", success_chart_svg(runs))
            .replace("%ERRORS%", _errors_table(errors, summary))
            .replace("%DATA%", _json_for_script(data)))


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%TITLE%</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto; max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
.meta { color: #666; margin-top: 0; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eee; white-space: nowrap; } th { background: #f4f4f6; font-weight: 600; text-align: center; }
.table-scroll { max-width: 100%; overflow-x: auto; } .table-scroll th { white-space: normal; min-width: 4em; vertical-align: bottom; }
.downloads { margin: .3em 0; font-size: .9em; } .downloads a { margin-right: 1em; }
td.n { text-align: right; } td.l { text-align: left; } .ci { color: #777; font-size: .9em; }
.controls { display: flex; flex-wrap: wrap; gap: .8em; align-items: center; margin: .6em 0; }
.controls select, .controls button { font: inherit; padding: 2px 6px; }
#episode-header { margin: .4em 0; font-weight: 600; }
.ok { color: #1e7d32; } .bad { color: #b3261e; } .muted { color: #777; }
.turn { display: grid; grid-template-columns: minmax(200px, 300px) 1fr; gap: 1.2em; align-items: start; }
.frame img { max-width: 100%; image-rendering: pixelated; border: 1px solid #ccc; }
pre { white-space: pre-wrap; word-break: break-word; background: #f7f7f9; border: 1px solid #e3e3e8; padding: 6px 8px; margin: .2em 0 .6em; }
pre.grid { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 18px; line-height: 1.1; white-space: pre; }
.field-label { font-weight: 600; margin-top: .4em; }
details { margin: .3em 0; } summary { cursor: pointer; color: #444; }
</style>
</head>
<body>
<h1>%TITLE%</h1>
<p class="meta">%META%</p>
<section id="summary"><h2>Summary</h2>
%SUMMARY%
<p class="muted">Success: the game ended in its success state within the budgets (95 % Wilson interval).
Effective % / valid %: per episode, the share of turns whose last executed action changed the state /
that executed at least one action (the reference's definitions), then averaged over episodes.
Format error %: turns whose reply did not parse into known actions. Errors (requests that kept failing)
are not counted as episodes.</p>
</section>
%COMPARE%
<section id="chart"><h2>Success rate</h2>
%CHART%
</section>
%ERRORS%
<section id="viewer"><h2>Trajectories</h2>
<div class="controls">
<label>Environment <select id="env-select"></select></label>
<label>Seed <select id="seed-select"></select></label>
<button id="prev-turn" type="button">&#9664; Prev</button>
<input id="turn-range" type="range" min="0" max="0" value="0">
<button id="next-turn" type="button">Next &#9654;</button>
<span id="turn-label"></span>
</div>
<div id="episode-header"></div>
<div class="turn"><div class="frame" id="frame"></div><div id="turn-detail"></div></div>
</section>
<script type="application/json" id="ragen-data">%DATA%</script>
<script>
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("ragen-data").textContent);
  var envSelect = document.getElementById("env-select");
  var seedSelect = document.getElementById("seed-select");
  var range = document.getElementById("turn-range");
  var state = { env: null, index: -1, step: 0 };

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function fmt(x, d) { return (typeof x === "number") ? x.toFixed(d) : "–"; }
  function episodesOf(env) {
    var out = [];
    for (var i = 0; i < data.episodes.length; i++) { if (data.episodes[i].env === env) { out.push(i); } }
    return out;
  }
  function field(parent, label, text, cls) {
    parent.appendChild(el("div", "field-label", label));
    parent.appendChild(el("pre", cls || "", text === "" ? "(empty)" : text));
  }
  function stateText(ep, k) {
    if (ep.states && ep.states.length > k) { return ep.states[k]; }
    if (k < ep.turns.length) { return ep.turns[k].obs; }
    return ep.final_obs;
  }
  function fillEnvs() {
    envSelect.textContent = "";
    data.envs.forEach(function (env) {
      var n = episodesOf(env).length;
      var opt = el("option", null, env + " (" + n + ")");
      opt.value = env;
      envSelect.appendChild(opt);
    });
  }
  function fillSeeds() {
    seedSelect.textContent = "";
    episodesOf(state.env).forEach(function (i) {
      var ep = data.episodes[i];
      var label = "seed " + ep.seed + (ep.noise_seed !== null && ep.noise_seed !== undefined ? " / noise " + ep.noise_seed : "") +
        (ep.success ? "  \\u2713" : "  \\u2717");
      var opt = el("option", null, label);
      opt.value = String(i);
      seedSelect.appendChild(opt);
    });
  }
  function render() {
    var header = document.getElementById("episode-header");
    var frame = document.getElementById("frame");
    var detail = document.getElementById("turn-detail");
    header.textContent = ""; frame.textContent = ""; detail.textContent = "";
    if (state.index < 0) {
      header.textContent = "No finished episodes for this environment.";
      document.getElementById("turn-label").textContent = "";
      range.max = "0"; range.value = "0";
      return;
    }
    var ep = data.episodes[state.index];
    var last = ep.turns.length;
    state.step = Math.max(0, Math.min(state.step, last));
    range.max = String(last); range.value = String(state.step);
    document.getElementById("turn-label").textContent =
      state.step < last ? "turn " + (state.step + 1) + " of " + last : "end (" + last + " turns)";
    header.appendChild(el("span", null, ep.env + ", seed " + ep.seed + ": "));
    header.appendChild(el("span", ep.success ? "ok" : "bad",
      ep.success ? "success" : (ep.truncated ? "out of budget" : (ep.terminated ? "failed" : "not finished"))));
    header.appendChild(el("span", "muted", ", return " + fmt(ep["return"], 2)));

    var k = state.step;
    if (ep.frames && ep.frames.length > k) {
      var img = el("img");
      img.src = data.frames[ep.frames[k]];
      img.alt = "state " + k;
      img.id = "frame-img";
      frame.appendChild(img);
      frame.appendChild(el("div", "muted", k < last ? "the state the model saw" : "the final state"));
    } else {
      var grid = el("pre", "grid", stateText(ep, k));
      grid.id = "frame-text";
      frame.appendChild(grid);
      frame.appendChild(el("div", "muted", k < last ? "the state the model saw (text)" : "the final state (text)"));
    }
    if (k < last) {
      var t = ep.turns[k];
      var box = el("div"); box.id = "turn-box";
      if (t.matched) {
        field(box, "Think", t.think, "think");
        field(box, "Answer", t.answer, "answer");
      } else {
        box.appendChild(el("div", "bad", "The reply did not match the think/answer format."));
        field(box, "Reply", t.response, "answer");
      }
      var acts = el("div");
      acts.appendChild(el("span", "field-label", "Actions run: "));
      acts.appendChild(el("span", null, t.actions.length ? t.actions.join(", ") : "none"));
      if (t.invalid.length) {
        acts.appendChild(el("span", "bad", "  unknown: " + t.invalid.join(", ")));
      }
      box.appendChild(acts);
      var rew = el("div");
      rew.appendChild(el("span", "field-label", "Reward: "));
      rew.appendChild(el("span", null, fmt(t.reward, 2) + " (game " + fmt(t.game_reward, 2) + ", format penalty " + fmt(t.penalty, 2) + ")"));
      box.appendChild(rew);
      if (t.tokens !== null && t.tokens !== undefined) {
        box.appendChild(el("div", "muted", t.tokens + " tokens" + (t.latency ? ", " + fmt(t.latency, 2) + " s" : "") +
          (t.attempts > 1 ? ", " + t.attempts + " attempts" : "") + (t.finish ? ", finish: " + t.finish : "")));
      }
      var d1 = el("details"); d1.appendChild(el("summary", null, "Reply as sent to the environment"));
      d1.appendChild(el("pre", null, t.response)); box.appendChild(d1);
      if (t.raw !== null && t.raw !== undefined) {
        var d2 = el("details"); d2.appendChild(el("summary", null, "Raw reply from the model"));
        d2.appendChild(el("pre", null, t.raw)); box.appendChild(d2);
      }
      var d3 = el("details"); d3.appendChild(el("summary", null, "Observation (the user message)"));
      d3.appendChild(el("pre", null, t.obs)); box.appendChild(d3);
      detail.appendChild(box);
    } else {
      var endBox = el("div"); endBox.id = "end-box";
      endBox.appendChild(el("div", ep.success ? "ok" : "bad", ep.success ? "Solved." : "Not solved."));
      field(endBox, "Final observation", ep.final_obs, "");
      detail.appendChild(endBox);
    }
    writeHash();
  }
  function writeHash() {
    if (state.index < 0) { return; }
    var ep = data.episodes[state.index];
    var h = "#env=" + encodeURIComponent(ep.env) + "&seed=" + ep.seed +
      "&turn=" + (state.step < ep.turns.length ? String(state.step + 1) : "end");
    if (location.hash !== h) {
      try { history.replaceState(null, "", h); } catch (e) { /* file:// without history: keep going */ }
    }
  }
  function selectEnv(env, seed) {
    state.env = env;
    envSelect.value = env;
    fillSeeds();
    var idx = episodesOf(env);
    state.index = idx.length ? idx[0] : -1;
    if (seed !== undefined) {
      for (var i = 0; i < idx.length; i++) { if (data.episodes[idx[i]].seed === seed) { state.index = idx[i]; break; } }
    }
    if (state.index >= 0) { seedSelect.value = String(state.index); }
  }
  function readHash() {
    var params = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      var p = kv.split("=");
      if (p.length === 2) { params[decodeURIComponent(p[0])] = decodeURIComponent(p[1]); }
    });
    return params;
  }
  function applyHash() {
    var p = readHash();
    var env = data.envs.indexOf(p.env) >= 0 ? p.env : data.envs[0];
    selectEnv(env, p.seed !== undefined ? parseInt(p.seed, 10) : undefined);
    state.step = 0;
    if (state.index >= 0 && p.turn) {
      state.step = p.turn === "end" ? data.episodes[state.index].turns.length : Math.max(0, parseInt(p.turn, 10) - 1 || 0);
    }
    render();
  }
  envSelect.addEventListener("change", function () { selectEnv(envSelect.value); state.step = 0; render(); });
  seedSelect.addEventListener("change", function () { state.index = parseInt(seedSelect.value, 10); state.step = 0; render(); });
  range.addEventListener("input", function () { state.step = parseInt(range.value, 10); render(); });
  document.getElementById("prev-turn").addEventListener("click", function () { state.step -= 1; render(); });
  document.getElementById("next-turn").addEventListener("click", function () { state.step += 1; render(); });
  document.addEventListener("keydown", function (e) {
    if (e.target && (e.target.tagName === "SELECT" || e.target.tagName === "INPUT")) { return; }
    if (e.key === "ArrowLeft") { state.step -= 1; render(); }
    if (e.key === "ArrowRight") { state.step += 1; render(); }
  });
  window.addEventListener("hashchange", applyHash);
  fillEnvs();
  if (data.envs.length) { applyHash(); }
  document.body.setAttribute("data-viewer-ready", "1");
})();
</script>
</body>
</html>
"""
