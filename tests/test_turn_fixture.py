"""The step hot path keeps every output: scripted episodes on every id replayed against the
outputs recorded before it was optimised (issue 23 goal 4; see ``tests/turn_fixture.py``)."""

from __future__ import annotations

import json

import pytest

from turn_fixture import CONFIGS, FIXTURE, play

RECORDED = json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("config", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_scripted_episodes_match_the_recording(config):
    label = config[0]
    got = play(*config)
    want = RECORDED[label]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        where = f"{label} seed={w['seed']} {w['mode']}"
        assert g["reset"] == w["reset"], f"{where}: reset"
        assert len(g["steps"]) == len(w["steps"]), f"{where}: episode length"
        for k, (gs, ws) in enumerate(zip(g["steps"], w["steps"])):
            assert gs == ws, f"{where} step {k + 1}"


def test_info_is_json_safe_with_the_documented_keys():
    """Every recorded step info is strict UTF-8 JSON and holds the protocol keys in order."""
    from ragen_envs.protocol import INFO_KEYS

    for label, episodes in RECORDED.items():
        for episode in episodes:
            for step in episode["steps"]:
                info = json.loads(step[4])
                json.dumps(info, allow_nan=False).encode("utf-8")
                assert list(info)[: len(INFO_KEYS)] == list(INFO_KEYS), label
