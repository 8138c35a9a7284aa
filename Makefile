# The two README commands. Each one creates .venv and installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
EXTRAS ?= dev

.PHONY: demo test bench clean

$(VENV)/.installed-$(EXTRAS): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[$(EXTRAS)]"
	touch $@

demo: $(VENV)/.installed-$(EXTRAS)
	$(PY) -m ragen_envs.demo

test: $(VENV)/.installed-$(EXTRAS)
	$(PY) -m pytest -q

bench:
	$(MAKE) EXTRAS=dev,bench $(VENV)/.installed-dev,bench
	$(PY) benchmarks/bench_sokoban_generation.py
	$(PY) benchmarks/bench_frozenlake_turn.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
