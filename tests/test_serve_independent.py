"""In ``ragen serve`` one request cannot fail or starve another (issue 43, item 2): a temperature
too small for float32 is greedy instead of overflowing the whole batch, a row whose logits come
out NaN fails its own request while the others draw exactly as without it, every JSON body the
parser refuses is a one-line 400 (no traceback), a prompt too long by its characters alone is
refused before it is tokenized, and a request under a full batch of long ``n=16`` requests gets a
place within a few steps (rows that leave for it rejoin with their tokens: same replies)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

torch = pytest.importorskip("torch")

from ragen_envs.agents import make_agent  # noqa: E402
from ragen_envs.lm import engine as lm_engine  # noqa: E402
from ragen_envs.lm.engine import BAD_ROW, MIN_TEMPERATURE, draw_rows, draw_tokens  # noqa: E402
from ragen_envs.models import build_tiny_checkpoint  # noqa: E402
from ragen_envs.lm.token_engine import Job, TokenEngine, fair_evictions, fair_pick  # noqa: E402
from ragen_envs.serve import HFBackend, make_server, serve_in_thread  # noqa: E402

MESSAGES = [{"role": "user", "content": "Turn 1:\nState:\n#P_O#\n"}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_checkpoint(tmp_path_factory.mktemp("independent") / "tiny")
    return make_agent(f"hf:{path}", max_tokens=8)


@pytest.fixture(scope="module")
def served(tiny):
    backend = HFBackend(tiny, "tiny", max_tokens_limit=5000, max_context=4096)
    server = make_server(backend, "127.0.0.1", 0, workers=16, idle_timeout=5.0)
    serve_in_thread(server)
    yield backend, f"http://127.0.0.1:{server.server_port}/v1/chat/completions"
    server.shutdown()
    server.server_close()
    backend.close()


def _post(url: str, raw: bytes):
    req = urllib.request.Request(url, data=raw, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


# ---------------------------------------------------------------------- 1. numerics
def test_a_tiny_temperature_is_greedy_and_cannot_overflow():
    logits = torch.tensor([[1.0, 3.0, 2.0], [3e38, -3e38, 0.0]])
    gen = torch.Generator().manual_seed(0)
    assert draw_tokens(logits, 5e-324, 1.0, gen).tolist() == [1, 0]  # below the floor: the argmax
    # just above the floor, with logits whose quotient overflows float32: still a proper draw
    assert draw_tokens(logits, MIN_TEMPERATURE, 0.5, gen).tolist() == [1, 0]
    per_row = draw_tokens(logits, torch.tensor([[MIN_TEMPERATURE], [2e-5]]), torch.tensor([[1.0], [1e-300]]), gen)
    assert per_row.tolist() == [1, 0]
    assert draw_rows(logits, [5e-324, 1e-320], [1.0, 1.0], [gen, gen]) == [1, 0]


def test_a_row_with_nan_logits_fails_alone_and_the_others_draw_as_without_it():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(3))
    shared = torch.Generator().manual_seed(1)
    own = torch.Generator().manual_seed(2)
    want = draw_rows(logits[[0, 2, 3]], [1.0, 0.7, 0.0], [1.0, 0.9, 1.0], [shared, own, shared])
    broken = logits.clone()
    broken[1, 7] = float("nan")
    shared.manual_seed(1)
    own.manual_seed(2)
    got = draw_rows(broken, [1.0, 1.0, 0.7, 0.0], [1.0, 1.0, 0.9, 1.0], [shared, shared, own, shared])
    assert got[1] == BAD_ROW and [got[0], got[2], got[3]] == want
    with pytest.raises(ValueError, match="not usable"):  # the trainer's single-job path: an error, not a draw
        draw_tokens(broken, 1.0, 1.0, shared)


def test_a_request_at_temperature_5e_324_beside_six_others_all_succeed(served):
    _, url = served
    results: dict[int, tuple] = {}

    def send(i: int) -> None:
        body = {"messages": MESSAGES, "max_tokens": 30, "temperature": 5e-324 if i == 0 else 1.0, "seed": i}
        results[i] = _post(url, json.dumps(body).encode())

    threads = [threading.Thread(target=send, args=(i,)) for i in range(7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(status == 200 for status, _ in results.values()), results
    greedy = _post(url, json.dumps({"messages": MESSAGES, "max_tokens": 30, "temperature": 0}).encode())[1]
    assert results[0][1]["choices"][0]["message"]["content"] == greedy["choices"][0]["message"]["content"]


def _run(eng: TokenEngine, requests: list[dict]) -> list[list]:
    """Submit ``requests`` together; each one's events until it is done or failed."""
    jobs = []
    for r in requests:
        job = Job(len(r["ids"]), stream=False)
        eng.submit(job, r["ids"], r.get("n", 1), r["temperature"], 1.0, r["max_new"], (), r.get("seed"))
        jobs.append(job)
    out = []
    for job, r in zip(jobs, requests):
        events, done = [], 0
        while done < r.get("n", 1):
            kind, index, payload = job.events.get(timeout=60)
            events.append((kind, index, payload))
            if kind == "error":
                break
            done += kind == "done"
        out.append(events)
    return out


def test_nan_logits_in_one_row_fail_its_request_only(tiny, monkeypatch):
    """The doomed request's row gets NaN logits after every forward pass (as a broken model
    would give it): it gets one error; the three others, seeded and greedy, get exactly the
    replies of a run without it."""
    tok = tiny.tokenizer
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in ("Turn 1:\nState:\n#P_O#\n", "go left", "abc")]
    others = [dict(ids=ids[0], temperature=1.0, seed=4, max_new=20, n=2), dict(ids=ids[1], temperature=0.0, max_new=20),
              dict(ids=ids[2], temperature=0.8, seed=9, max_new=20)]
    eng = TokenEngine(tiny.model, tok, "cpu", batch_size=16, batch_wait_s=0.05)
    try:
        alone = _run(eng, others)
        doomed = dict(ids=ids[1], temperature=1.0, seed=1, max_new=20)
        original_admit, original_step = lm_engine.RunningBatch.admit, lm_engine.RunningBatch.step

        def poison(batch):
            for j, row in enumerate(batch.rows):
                if row.job is doomed_job[0]:
                    batch.logits[j] = float("nan")

        def admit(self, prompts, payloads):
            original_admit(self, prompts, payloads)
            poison(self)

        def step(self, tokens):
            original_step(self, tokens)
            poison(self)

        monkeypatch.setattr(lm_engine.RunningBatch, "admit", admit)
        monkeypatch.setattr(lm_engine.RunningBatch, "step", step)
        doomed_job: list = [None]
        real_submit = eng.submit

        def submit(job, *args, **kwargs):
            if doomed_job[0] is None:
                doomed_job[0] = job
            real_submit(job, *args, **kwargs)

        eng.submit = submit
        together = _run(eng, [doomed, *others])
    finally:
        eng.close()
    assert [e[0] for e in together[0]] == ["error"] and "not finite" in together[0][0][2]
    assert eng.stats["failed_rows"] == 1
    texts = [[(k, i, p.text, p.completion_tokens) for k, i, p in ev if k == "done"] for ev in together[1:]]
    assert texts == [[(k, i, p.text, p.completion_tokens) for k, i, p in ev if k == "done"] for ev in alone]


# ---------------------------------------------------------------------- 2. JSON bodies
@pytest.mark.parametrize("raw, needle", [
    (b'{"messages": [], "max_tokens": ' + b"9" * 4400 + b"}", "more than 4300 digits"),
    (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', "not valid UTF-8"),
    (b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
    (b'{"messages": [}', "not valid JSON"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": ' + b"1" * 4000 + b"}", "temperature"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "top_p": ' + b"1" * 4000 + b".5}", "top_p"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": Infinity}', "temperature"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "top_p": -Infinity}', "top_p"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": NaN}', "max_tokens"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "n": Infinity}', "n must be"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "seed": NaN}', "seed"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1' + b"0" * 4000 + b"}", "max_tokens"),
])
def test_every_body_the_parser_or_the_checks_refuse_is_a_one_line_400(served, raw, needle, capfd):
    _, url = served
    capfd.readouterr()
    status, answer = _post(url, raw)
    message = answer["error"]["message"]
    assert status == 400 and needle in message and "\n" not in message and len(message) < 300, (status, answer)
    assert "Traceback" not in capfd.readouterr().err  # the server logs handler errors' tracebacks there


# ---------------------------------------------------------------------- 3. long prompts
def test_a_prompt_too_long_by_its_characters_is_refused_before_tokenizing(served, monkeypatch):
    backend, url = served
    per_token = backend.chars_per_token
    assert per_token is not None and per_token < 64
    calls = []
    original = backend.prompt_ids
    monkeypatch.setattr(backend, "prompt_ids", lambda request: calls.append(1) or original(request))
    text = "push the box " * (4096 * per_token // 13 + 1)  # just past context x the longest token
    start = time.monotonic()
    status, answer = _post(url, json.dumps({"messages": [{"role": "user", "content": text}]}).encode())
    assert status == 400 and "at least" in answer["error"]["message"] and not calls
    assert time.monotonic() - start < 5
    # a prompt under the bound is tokenized and refused by its real token count, as before
    status, answer = _post(url, json.dumps({"messages": [{"role": "user", "content": "box " * 6000}]}).encode())
    assert status == 400 and "context is 4096" in answer["error"]["message"] and calls


def test_the_character_bound_is_never_below_the_real_token_count(served):
    backend, _ = served
    tok = backend.agent.tokenizer
    per_token = backend.chars_per_token
    for text in ("push the box " * 50, "Turn 1:\nState:\n#P_O#\n" * 40, "√√√ é " * 30, "<|im_end|>" * 20,
                 "".join(chr(c) for c in range(32, 3000))):
        assert len(tok(text, add_special_tokens=False)["input_ids"]) >= len(text) / per_token


# ---------------------------------------------------------------------- 4. fair places
def test_fair_pick_and_evictions_hand_cases():
    assert fair_pick(["A", "A", "A", "B"], {"A": 4}, 2) == [3, 0]  # the docstring's case
    assert fair_pick(["A", "B", "A", "B"], {}, 3) == [0, 1, 2]  # round robin
    # batch 16 held by A; B (n=1) waits: one row of A, its fewest tokens first, leaves
    assert fair_evictions(["A"] * 16, list(range(16, 0, -1)), [100] * 16, ["B"], 16, 256) == [15]
    # four requests at their share of 4 and a fifth: the share is 3, one row leaves
    running = [q for q in "ABCD" for _ in range(4)]
    assert len(fair_evictions(running, [5] * 16, [50] * 16, ["E"], 16, 256)) == 1
    assert fair_evictions(running, [5] * 16, [50] * 16, ["A"] * 12, 16, 256) == []  # A waits for its own
    # more requests than places: a row leaves only after slice_steps steps in the batch
    assert fair_evictions(list("ABCD"), [9] * 4, [10, 300, 20, 400], ["E", "F"], 4, 256) == [3, 1]
    assert fair_evictions(list("ABCD"), [9] * 4, [10, 30, 20, 40], ["E", "F"], 4, 256) == []


def test_a_short_request_gets_a_place_within_a_few_steps_beside_four_n16_requests(tiny):
    """Four requests of n=16 and 4,000 tokens fill the batch of 16 (64 rows); a 4-token
    request sent then finishes within a few steps, while the long ones still decode. Before,
    it waited for 4,000 steps of the first request's 16 rows."""
    tok = tiny.tokenizer
    eng = TokenEngine(tiny.model, tok, "cpu", batch_size=16, batch_wait_s=0.01)
    ids = tok("Turn 1:\nState:\n#P_O#\n", add_special_tokens=False)["input_ids"]
    longs = [Job(len(ids), stream=True) for _ in range(4)]
    try:
        for job in longs:  # greedy: the untrained model repeats one token, so they run all 4,000
            eng.submit(job, ids, 16, 0.0, 1.0, 4000, (), None)
        deadline = time.monotonic() + 30
        while eng.stats["steps"] < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        short = Job(len(ids), stream=False)
        steps0 = eng.stats["steps"]
        eng.submit(short, ids, 1, 0.0, 1.0, 4, (), None)
        kind, _, done = short.events.get(timeout=60)
        waited = eng.stats["steps"] - steps0
        assert kind == "done" and done.completion_tokens == 4
        assert waited <= 4 + eng.join_wait_steps + 2, waited
        assert eng.stats["preempted_rows"] >= 1 and eng.stats["steps"] < 1000
        # every long request is decoding on its share of the places, none waits for another to end
        assert all(not job.events.empty() for job in longs)
    finally:
        for job in longs:
            job.cancel()
        eng.close()


def test_rows_that_leave_for_a_fairer_share_rejoin_with_the_same_reply(tiny):
    """A seeded n=16 request alone, then again while another n=16 request arrives midway (8 of
    its rows leave and rejoin by prefilling prompt + tokens): the same 16 replies."""
    tok = tiny.tokenizer
    ids = tok("Turn 2:\nState:\n#_PO#\n", add_special_tokens=False)["input_ids"]
    eng = TokenEngine(tiny.model, tok, "cpu", batch_size=16, batch_wait_s=0.01)
    try:
        alone = _run(eng, [dict(ids=ids, temperature=1.0, seed=21, max_new=60, n=16)])[0]
        job = Job(len(ids), stream=True)
        steps0 = eng.stats["steps"]
        eng.submit(job, ids, 16, 1.0, 1.0, 60, (), 21)
        deadline = time.monotonic() + 30
        while eng.stats["steps"] < steps0 + 15 and time.monotonic() < deadline:
            time.sleep(0.005)
        other = Job(len(ids), stream=False)
        preempted0 = eng.stats["preempted_rows"]
        eng.submit(other, ids, 16, 1.0, 1.0, 60, (), 5)
        got = {}
        while len(got) < 16:
            kind, index, payload = job.events.get(timeout=60)
            assert kind != "error", payload
            if kind == "done":
                got[index] = payload.text
        assert eng.stats["preempted_rows"] > preempted0
    finally:
        eng.close()
    assert [got[i] for i in range(16)] == [p.text for k, _, p in sorted(
        (e for e in alone if e[0] == "done"), key=lambda e: e[1])]


def test_a_large_body_is_scanned_for_its_end_once_not_at_every_read(monkeypatch):
    """The selector thread reads a body 64 KB at a time; it used to re-scan the whole buffer for
    the end of the headers at every read (an 8 MB body: ~130 scans, 2 s of the one thread that
    reads every client's request). Once the headers say how long the body is, it waits for that."""
    import socket

    from ragen_envs._http import PooledHTTPServer

    class Backend:
        model_name = "stub"

        def complete(self, request):  # pragma: no cover - the body below is refused before
            raise AssertionError("not reached")

    calls = []
    original = PooledHTTPServer._advance
    monkeypatch.setattr(PooledHTTPServer, "_advance", lambda self, conn: calls.append(len(conn.buf)) or original(self, conn))
    server = make_server(Backend(), "127.0.0.1", 0, workers=2)
    serve_in_thread(server)
    try:
        body = b'{"messages": "' + b"x" * (8 << 20) + b'"}'
        body = body[: (8 << 20) - 16]  # under the 8 MiB limit; not JSON any more, which is fine
        s = socket.create_connection(server.server_address, timeout=30)
        s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        reply = s.recv(4096)
        s.close()
    finally:
        server.shutdown()
        server.server_close()
    assert reply.startswith(b"HTTP/1.1 400") and len(calls) <= 4, (reply[:40], len(calls))
