# The two README commands. Each one creates .venv and installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# `make test` installs every extra so no test is skipped for a missing package.
EXTRAS ?= all

.PHONY: demo test bench clean

$(VENV)/.installed-$(EXTRAS): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[$(EXTRAS)]"
	touch $@

# The trainer demo: a tiny model learns Sokoban on the CPU (SFT, then StarPO-S, then the 256
# EVAL_SEEDS); about 11-14 minutes on 2 cores; writes runs/demo/summary.json.
demo:
	$(MAKE) EXTRAS=dev,train $(VENV)/.installed-dev,train
	$(PY) -m ragen_envs.starpo.demo --out runs/demo

test: $(VENV)/.installed-$(EXTRAS)
	$(PY) -m pytest -q

# Side-by-side benchmarks (BENCHMARKS.md). gym-sokoban is the peer of the generation benchmark;
# --no-deps because only its room_utils module is loaded (its package imports the old gym).
bench: $(VENV)/.installed-$(EXTRAS)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps gym-sokoban==0.0.6
	$(PY) benchmarks/bench_sokoban_generation.py --levels 300
	$(PY) benchmarks/bench_frozenlake_turn.py
	$(PY) benchmarks/bench_eval_concurrency.py --latency 0.1 --episodes-c1 32 --episodes-c16 256

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
