# dflash: `make` builds ./dflash; `make test` builds and runs the test suite.
# Dependencies come from Debian packages (scripts/setup.sh installs them).

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -fopenmp -Isrc
# the libraries every program links (the fuzz targets' rule below too)
BASE_LIBS := -lcjson -lonig -lutf8proc -lopenblas -llz4 -lzstd -lcairo $(shell pkg-config --libs libxxhash 2>/dev/null || echo -lxxhash) -lm -fopenmp
LDLIBS  += $(BASE_LIBS)
# Instrumentation flags for compiling and linking (make test-sanitize, make fuzz).
SANITIZE ?=
CFLAGS  += $(SANITIZE)
LDLIBS  += $(SANITIZE)
CUDA_SRC := $(shell find src/backend/cuda -name '*.cu' | sort)
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)

BUILD   := build
LIB_SRC := $(filter-out src/cli/main.c,$(shell find src -name '*.c' | sort))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/dflash_py.o
TEST_SRC := $(filter-out tests/test_util.c,$(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_COMMON := $(BUILD)/tests/test_util.o

ifneq ($(and $(NVCC),$(CUDA_SRC)),)
CFLAGS  += -DDF_HAVE_CUDA
CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
# nvcc may be a wrapper script outside the toolkit (/usr/local/bin/nvcc): ask nvcc where its toolkit
# is rather than guessing from its path.
CUDA_HOME ?= $(realpath $(shell $(NVCC) -v --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$$ TOP=//p'))
CUDA_LIBDIR := $(patsubst %/libcudart.so,%,$(firstword $(wildcard $(CUDA_HOME)/lib64/libcudart.so \
               $(CUDA_HOME)/lib/libcudart.so $(CUDA_HOME)/targets/x86_64-linux/lib/libcudart.so)))
ifeq ($(CUDA_LIBDIR),)
$(error nvcc found at $(NVCC) (toolkit $(CUDA_HOME)) but no libcudart.so under it; set CUDA_HOME)
endif
LDLIBS  += -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudart -lcublasLt -lstdc++
# The GPU code in the binary (docs/kernels.md, "GPU tiers"): sm_90a, Hopper's wgmma kernels; sm_80, the
# portable tier as machine code for Ampere and Ada; compute_80, the portable tier as PTX, which the driver
# compiles for any newer GPU (Blackwell included). At backend creation the device picks the tier whose
# code it runs. CUDA_ARCHS=compute_80 builds the PTX alone: how the portable tier is tested on a Hopper
# machine (scripts/test_gpu.sh). A changed list needs a clean build (or another BUILD folder).
CUDA_ARCHS ?= sm_90a sm_80 compute_80
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode=arch=$(subst sm_,compute_,$(a)),code=$(a))
NVCCFLAGS ?= -O3
NVCCFLAGS += -std=c++20 -Isrc $(CUDA_GENCODE) -DDF_HAVE_CUDA -DDF_CUDA_ARCHS='"$(CUDA_ARCHS)"' -Xcompiler -Wall,-Wextra
endif

.PHONY: all test clean demo demo-data test-sanitize fuzz fuzz-build nccl-check dev
all: dflash

dflash: $(BUILD)/src/cli/main.o $(BUILD)/libdflash.a
	$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/libdflash.a: $(LIB_OBJ) $(CUDA_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

# src/model/dflash.py (what exports write for transformers' trust_remote_code) as a C string
$(BUILD)/gen/dflash_py.c: src/model/dflash.py scripts/embed_text.sh
	@mkdir -p $(dir $@)
	bash scripts/embed_text.sh df_dflash_py $< > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/dflash_py.o: $(BUILD)/gen/dflash_py.c
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/tests/test_util.o: tests/test_util.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -DDF_SOURCE_DIR=\"$(CURDIR)\" -MMD -MP -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(TEST_COMMON) $(BUILD)/libdflash.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -DDF_SOURCE_DIR=\"$(CURDIR)\" -o $@ $< $(TEST_COMMON) $(BUILD)/libdflash.a $(LDLIBS) -lcmocka

# test_backend_ops: the op cases (tests/backend_ops/: one file per family of ops, registry.c lists them);
# test_kernel_variants checks the kernel variants they set against the declared list
OPS_CASES_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/backend_ops/*.c))
$(BUILD)/tests/backend_ops/%.o: tests/backend_ops/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -MMD -MP -c -o $@ $<

$(BUILD)/tests/test_backend_ops $(BUILD)/tests/test_kernel_variants: $(BUILD)/tests/%: tests/%.c $(TEST_COMMON) \
		$(OPS_CASES_OBJ) $(BUILD)/libdflash.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -DDF_SOURCE_DIR=\"$(CURDIR)\" -o $@ $< $(TEST_COMMON) $(OPS_CASES_OBJ) $(BUILD)/libdflash.a \
		$(LDLIBS) -lcmocka

# tools/nccl_check: two or more processes joined by the RANK/WORLD_SIZE/...
# rendezvous check NCCL collectives on GPUs and print the bus bandwidth.
nccl-check: $(BUILD)/tools/nccl_check
$(BUILD)/tools/nccl_check: tools/nccl_check.c $(BUILD)/libdflash.a
	@test -n "$(CUDA_OBJ)" || { echo "make nccl-check needs CUDA (no nvcc found)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -o $@ $< $(BUILD)/libdflash.a $(LDLIBS)

# dev/cuda: the kernel benchmarks, a program per op family (each kernel variant validated against the
# CPU backend, then timed with device events; dev/cuda/dev_util.h). They build with or without CUDA, as
# the tests do (without a GPU they say so and exit 1); scripts/test_gpu.sh runs them (part kernels).
DEV_SRC := $(filter-out dev/cuda/dev_util.c,$(wildcard dev/cuda/*.c))
DEV_BIN := $(DEV_SRC:dev/cuda/%.c=$(BUILD)/dev/cuda/%)
DEV_COMMON := $(BUILD)/dev/cuda/dev_util.o
# Kernel versions tried and dropped (dev/cuda/*_vN_*.cu, their figure and commit in the header): compiled
# against src/'s tiles whenever nvcc is found, so that they stay buildable (no GPU needed).
DEV_CUDA_SRC := $(wildcard dev/cuda/*.cu)
DEV_CUDA_OBJ := $(if $(CUDA_OBJ),$(DEV_CUDA_SRC:dev/cuda/%.cu=$(BUILD)/dev/cuda/%.o))
dev: $(DEV_COMMON) $(DEV_BIN) $(DEV_CUDA_OBJ)
$(BUILD)/dev/cuda/bench_%: dev/cuda/bench_%.c $(DEV_COMMON) $(BUILD)/libdflash.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -o $@ $< $(DEV_COMMON) $(BUILD)/libdflash.a $(LDLIBS)

test: dflash $(TEST_BIN)
	bash scripts/check_structure.sh
	bash scripts/fetch_test_tokenizers.sh
	bash scripts/run_tests.sh $(TEST_BIN)

# The bundled default run (README: make demo): the Debian dependencies first
# (so that a fresh machine can build), then `dflash train` with no data
# options (the target's own responses, below) and `dflash eval` of the
# drafter on the held-out prompts, on a GPU when there is one
# (scripts/demo.sh).
demo:
	bash scripts/setup.sh
	$(MAKE) dflash
	bash scripts/demo.sh

# The bundled default's training data, committed: coder-tiny's own greedy
# responses to the prompts of assets/data/code-train.jsonl (spec section 5's
# recipe), made by dflash generate on the CPU (about 5 minutes on 2 idle
# cores). The settings file generate writes beside it names this machine's
# paths, so it is not kept.
DEMO_DATA := assets/data/code-train.regenerated.jsonl
demo-data: dflash
	rm -f $(DEMO_DATA) $(DEMO_DATA).generate.json
	./dflash generate --target assets/coder-tiny --input assets/data/code-train.jsonl --output $(DEMO_DATA) \
		--max-new-tokens 256 --batch 16
	rm -f $(DEMO_DATA).generate.json

# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer: a
# separate build in build-asan/ (CPU only), whose tests run against
# build-asan/root/, a tree of links to assets/, tests/ and src/ with the sanitized
# dflash in place of ./dflash (tests find files through DFLASH_SOURCE_DIR).
# Every test runs (about a minute on 2 cores); OpenMP threads wait passively,
# as spinning ones make a loaded machine many times slower (results do not
# depend on it).
ASAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMP_WAIT_POLICY=passive
test-sanitize:
	CFLAGS="-O1 -g" $(MAKE) BUILD=build-asan NVCC= SANITIZE="$(ASAN_FLAGS)" build-asan/dflash \
		$(TEST_BIN:$(BUILD)/%=build-asan/%)
	@mkdir -p build-asan/root
	ln -sfn $(CURDIR)/assets build-asan/root/assets
	ln -sfn $(CURDIR)/tests build-asan/root/tests
	ln -sfn $(CURDIR)/src build-asan/root/src
	ln -sfn $(CURDIR)/build-asan/dflash build-asan/root/dflash
	bash scripts/fetch_test_tokenizers.sh
	$(ASAN_ENV) DFLASH_SOURCE_DIR=$(CURDIR)/build-asan/root bash scripts/run_tests.sh $(TEST_BIN:$(BUILD)/%=build-asan/%)

$(BUILD)/dflash: $(BUILD)/src/cli/main.o $(BUILD)/libdflash.a
	$(CC) -o $@ $^ $(LDLIBS)

# libFuzzer targets (fuzz/fuzz_*.c) built with clang 14 in build-fuzz/; make
# fuzz runs each for FUZZ_SECONDS on its seed corpus (fuzz/corpus/<target>,
# copied to build-fuzz/corpus/ so the seeds stay as committed) and prints the
# executions. fuzz/README.md has the longer runs.
FUZZ_SECONDS ?= 20
FUZZ_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -Wno-pass-failed
FUZZ_TARGETS := $(basename $(notdir $(wildcard fuzz/fuzz_*.c)))
fuzz-build:
	CFLAGS="-O1 -g" $(MAKE) BUILD=build-fuzz NVCC= CC=clang SANITIZE="$(FUZZ_FLAGS) -fsanitize=fuzzer-no-link" \
		build-fuzz/libdflash.a $(FUZZ_TARGETS:%=build-fuzz/fuzz/%)

build-fuzz/fuzz/%: fuzz/%.c build-fuzz/libdflash.a
	@mkdir -p $(dir $@)
	clang -O1 -g -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wno-unused-parameter -Isrc -Ifuzz \
		-DDF_SOURCE_DIR=\"$(CURDIR)\" $(FUZZ_FLAGS) -fsanitize=fuzzer -o $@ $< build-fuzz/libdflash.a \
		$(BASE_LIBS)

fuzz: fuzz-build
	bash fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

clean:
	rm -rf $(BUILD) build-asan build-fuzz build-ptx dflash

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
