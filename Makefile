# The two README commands. Each one creates .venv and installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# `make test` installs every extra so no test is skipped for a missing package.
EXTRAS ?= all

# verl (its own venv: verl 0.9.1 pins transformers >= 5.5.3, < 5.11; torch is this machine's 2.13.0)
VERL_VENV ?= .venv-verl
VERL_PY   := $(VERL_VENV)/bin/python

# verifiers 0.4 (its own venv: it pins mcp==2.0.0 and openai<3; the openenv extra needs mcp<2, .venv has openai 3)
VF_VENV ?= .venv-verifiers
VF_PY   := $(VF_VENV)/bin/python

.PHONY: demo demo-think test test-verl verl-venv test-verifiers verifiers-venv bench clean

$(VENV)/.installed-$(EXTRAS): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[$(EXTRAS)]"
	touch $@

# The trainer demo: a tiny model learns Sokoban on the CPU in 2 processes of 1 thread (SFT, then 40 StarPO-S
# iterations, then the 256 EVAL_SEEDS, 8 sampling streams); SFT stops early at 78 % on held-out layouts; 6 min 24-49 s
# on 2 quiet cores for the default seed (AMD EPYC, AVX-512, 2026-12-06; 5 min 43 s to 7 min 19 s over seeds, 632-811 s of
# CPU; BENCHMARKS.md#demo); `--seed N` / `--processes N` / `--threads N` after the module name;
# writes runs/demo/summary.json.
demo:
	$(MAKE) EXTRAS=dev,train $(VENV)/.installed-dev,train
	$(PY) -m ragen_envs.starpo.demo --out runs/demo

# The same with grounded <think> texts in every reply, as the paper trains them (longer replies:
# about twice the demo's time); writes runs/demo-think/demo.json with the reply-length trend.
demo-think:
	$(MAKE) EXTRAS=dev,train $(VENV)/.installed-dev,train
	$(PY) -m ragen_envs.starpo.demo --think --out runs/demo-think

# The main suite runs in TEST_WORKERS pytest-xdist processes, a test file per worker at a time (its module
# fixtures are built once); 2 = CI's cores. `make test TEST_WORKERS=0` runs it in one process, as
# plain `pytest -q` does; `auto` takes every core.
TEST_WORKERS ?= 2

# tests/verl and tests/verifiers run first, each in its own venv, so the main suite's count is the last line
test: $(VENV)/.installed-$(EXTRAS) $(VERL_VENV)/.installed $(VF_VENV)/.installed
	RAGEN_VERL_TESTS=1 $(VERL_PY) -m pytest -q tests/verl
	RAGEN_VERIFIERS_TESTS=1 $(VF_PY) -m pytest -q tests/verifiers
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

$(VERL_VENV)/.installed: pyproject.toml constraints-verl.txt
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_PY) -m pip install --quiet --disable-pip-version-check -c constraints-verl.txt -e . verl cachetools fastapi uvicorn pytest
	touch $@

verl-venv: $(VERL_VENV)/.installed

# the verl agent-loop tests alone (CPU, a fake server manager)
test-verl: $(VERL_VENV)/.installed
	RAGEN_VERL_TESTS=1 $(VERL_PY) -m pytest -q tests/verl

$(VF_VENV)/.installed: pyproject.toml constraints-verifiers.txt environments/ragen_envs_verifiers/pyproject.toml
	$(PYTHON) -m venv $(VF_VENV)
	$(VF_PY) -m pip install --quiet --disable-pip-version-check -c constraints-verifiers.txt -e . -e environments/ragen_envs_verifiers pytest
	touch $@

verifiers-venv: $(VF_VENV)/.installed

# the verifiers tests alone: vf-eval and the Python API against a local fake model server
test-verifiers: $(VF_VENV)/.installed
	RAGEN_VERIFIERS_TESTS=1 $(VF_PY) -m pytest -q tests/verifiers

# Side-by-side benchmarks (BENCHMARKS.md). gym-sokoban is the peer of the generation benchmark;
# --no-deps because only its room_utils module is loaded (its package imports the old gym).
bench: $(VENV)/.installed-$(EXTRAS)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps gym-sokoban==0.0.6
	$(PY) benchmarks/bench_sokoban_generation.py --levels 300
	$(PY) benchmarks/bench_frozenlake_turn.py
	$(PY) benchmarks/bench_eval_concurrency.py --latency 0.1 --episodes-c1 32 --episodes-c16 256

clean:
	rm -rf $(VENV) $(VERL_VENV) $(VF_VENV) .pytest_cache .hypothesis build *.egg-info
