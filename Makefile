# dflash: `make` builds ./dflash; `make test` builds and runs the test suite.
# Dependencies come from Debian packages (scripts/setup.sh installs them).

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wno-unused-parameter -fopenmp -Isrc
LDLIBS  += -lcjson -lonig -lutf8proc -lopenblas -llz4 -lzstd -lm -fopenmp
CUDA_SRC := $(wildcard src/backend/cuda/*.cu)
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)

BUILD   := build
LIB_SRC := $(filter-out src/cli/main.c,$(shell find src -name '*.c' | sort))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(filter-out tests/test_util.c,$(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_COMMON := $(BUILD)/tests/test_util.o

ifneq ($(and $(NVCC),$(CUDA_SRC)),)
CFLAGS  += -DDF_HAVE_CUDA
CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
CUDA_HOME := $(patsubst %/bin/nvcc,%,$(NVCC))
LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lstdc++
NVCCFLAGS ?= -O3
NVCCFLAGS += -std=c++20 -Isrc -gencode=arch=compute_90a,code=sm_90a -DDF_HAVE_CUDA -Xcompiler -Wall,-Wextra
endif

.PHONY: all test clean demo
all: dflash

dflash: $(BUILD)/src/cli/main.o $(BUILD)/libdflash.a
	$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/libdflash.a: $(LIB_OBJ) $(CUDA_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/tests/test_util.o: tests/test_util.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -DDF_SOURCE_DIR=\"$(CURDIR)\" -MMD -MP -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(TEST_COMMON) $(BUILD)/libdflash.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -DDF_SOURCE_DIR=\"$(CURDIR)\" -o $@ $< $(TEST_COMMON) $(BUILD)/libdflash.a $(LDLIBS) -lcmocka

test: dflash $(TEST_BIN)
	bash scripts/fetch_test_tokenizers.sh
	bash scripts/run_tests.sh $(TEST_BIN)

# The bundled default run (README: make demo): the Debian dependencies first
# (so that a fresh machine can build), then `dflash train` with no arguments.
demo:
	bash scripts/setup.sh
	$(MAKE) dflash
	./dflash train

clean:
	rm -rf $(BUILD) dflash

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
