# mpmd: the two commands of the README.
#   make demo   pipelined training of the example transformer on 8 CPU devices
#   make test   every test: lit (MLIR passes) and pytest (JAX integration)
# Both run scripts/bootstrap.sh first (installs what is missing, fast when done).

PYTHON ?= python3
BUILD_DIR := build/py
export XLA_FLAGS ?= --xla_force_host_platform_device_count=8

.PHONY: bootstrap build demo test test-lit test-python clean

bootstrap:
	@PYTHON=$(PYTHON) bash scripts/bootstrap.sh

# Rebuilds the C++ (incrementally) and reinstalls the extension.
build: bootstrap

demo: bootstrap
	$(PYTHON) examples/train_mlp.py

test-lit: bootstrap
	$(PYTHON) -c "from lit.main import main; main()" -sv $(BUILD_DIR)/test

test-python: bootstrap
	$(PYTHON) -m pytest -q test/python

test: test-lit test-python

clean:
	rm -rf build
