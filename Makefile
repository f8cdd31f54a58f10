# muser: one GNU Makefile, no configure step.
#   make           build ./muser
#   make test      build and run every test tier this machine supports
#   make check     layering table, self-contained headers, cited paths exist
#   make asan      sanitizer build (ASan + UBSan) of muser and the unit tests
#   make deps      install the Debian packages the build and tests need (root)
#   make up        deps (as root; otherwise print the apt-get line and stop),
#                  build, then `./muser up $(UP_ARGS)` (docs/up.md)
#   make test-gpu  the gpu tier (a CUDA device; tests/gpu/run.sh)
#
# With nvcc (PATH or /usr/local/cuda) `make` also builds the CUDA backend as
# a plugin, muser-cuda.so next to muser, loaded at run time (NVCC= skips it;
# CUDA_ARCH picks the GPUs it is compiled for).

CC      ?= gcc
OPT     ?= -O2
BUILD   ?= build
SAN     ?=
ARCH    := $(shell $(CC) -dumpmachine 2>/dev/null | cut -d- -f1)
COMMIT  := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)

CFLAGS  := -std=c11 $(OPT) -g -Wall -Wextra -Wshadow -Wno-unused-parameter \
           -D_GNU_SOURCE -pthread -fno-strict-aliasing -MMD -MP $(SAN) \
           -DMU_COMMIT=\"$(COMMIT)\"
LDLIBS  := -lm -lpthread -ldl -lutf8proc -ljansson -lmicrohttpd -lssl -lcrypto -ledit -lcurl -lsqlite3 \
           -lpng -ljpeg -lwebp -lwebpdemux

NVCC      ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_ARCH ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a \
             -gencode=arch=compute_90,code=compute_90
# -fmad=false: no product is fused into an add unless the code says fmaf,
# so the device rounds as the CPU's reference kernels do (src/gpu/cuda.cuh)
NVFLAGS   := -O3 -std=c++17 -fmad=false -Xcompiler -fPIC,-fvisibility=hidden,-Wall $(CUDA_ARCH)
CUDA_SRC  := $(wildcard src/gpu/*.cu)
CUDA_OBJ  := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
CUDA_PLUGIN := $(if $(NVCC),muser-cuda.so)
LDFLAGS := -pthread $(SAN)

# ISA kernel files get their flags and nothing else does.
ISA_x86_64  := src/kern/kern_avx2.c src/kern/kern_avx512.c src/kern/attn_avx2.c src/kern/attn_avx512.c \
               src/kern/gemm_avx2.c src/kern/gemm_avx512.c src/kern/gemm_amx.c src/kern/gemm_amx_q8.c \
               src/vision/vit_avx512.c src/kv/kvsha_avx512.c src/engine/rows_avx2.c \
               src/engine/logits_avx2.c
ISA_aarch64 := src/kern/kern_neon.c src/kern/attn_neon.c src/kern/gemm_neon.c
ISA_ALL     := $(ISA_x86_64) $(ISA_aarch64)
ISA_SRC     := $(wildcard $(ISA_$(ARCH)))
FLAGS_src/kern/kern_avx2.c   := -mavx2 -mfma -mf16c
FLAGS_src/kern/kern_avx512.c := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mfma -mf16c
FLAGS_src/kern/attn_avx512.c := $(FLAGS_src/kern/kern_avx512.c)
FLAGS_src/kern/gemm_avx512.c := $(FLAGS_src/kern/kern_avx512.c)
FLAGS_src/vision/vit_avx512.c := $(FLAGS_src/kern/kern_avx512.c)
FLAGS_src/kv/kvsha_avx512.c := -mavx512f -mavx512bw
FLAGS_src/engine/rows_avx2.c := -mavx2
FLAGS_src/engine/logits_avx2.c := -mavx2
# the tile instructions are inline assembly: no AMX flag needed
FLAGS_src/kern/gemm_amx.c    := $(FLAGS_src/kern/kern_avx512.c)
FLAGS_src/kern/gemm_amx_q8.c := $(FLAGS_src/kern/kern_avx512.c)
FLAGS_src/kern/attn_avx2.c   := $(FLAGS_src/kern/kern_avx2.c)
FLAGS_src/kern/gemm_avx2.c   := $(FLAGS_src/kern/kern_avx2.c)
FLAGS_src/kern/attn_neon.c   := $(FLAGS_src/kern/kern_neon.c)
FLAGS_src/kern/gemm_neon.c   := $(FLAGS_src/kern/kern_neon.c)
FLAGS_src/kern/kern_neon.c   := -march=armv8.2-a+dotprod+fp16

# The sampler reproduces llama.cpp's float arithmetic step for step: no
# fused multiply-add contraction there (GCC contracts by default where the
# target has FMA, as on arm64).
FLAGS_src/engine/sample.c       := -ffp-contract=off
FLAGS_src/engine/sample_chain.c := -ffp-contract=off
# and the image resize's double-precision weights are llama.cpp's to the bit
FLAGS_src/vision/image.c        := -ffp-contract=off
# the forward pass's elementwise loops (norms' scaling, residual adds) over
# rows of a variable width: -O2's very-cheap vectorizer takes only loops
# whose length it knows; no sum is reassociated either way (no -ffast-math)
FLAGS_src/engine/forward.c      := -fvect-cost-model=dynamic

LIB_SRC := $(filter-out $(ISA_ALL),$(wildcard src/*/*.c)) $(ISA_SRC)
CMD_SRC := $(wildcard cmd/muser/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
CMD_OBJ := $(CMD_SRC:%.c=$(BUILD)/%.o)
LIB     := $(BUILD)/libmuser.a
GEN_OBJ := $(BUILD)/gen/dash_html.o

UNIT_SRC := $(wildcard tests/unit/test_*.c)
# the image tests encode animated WebP (tests/unit/image_gen.h)
TEST_LDLIBS := -lwebpmux
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all test test-gpu check asan deps clean fuzz up
all: muser $(CUDA_PLUGIN)

# copied by rename, so a running ./muser (a test) does not block the build
muser: $(BUILD)/muser
	cp $< $@.tmp && mv -f $@.tmp $@

$(BUILD)/muser: $(CMD_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(CMD_OBJ) $(LIB) $(LDLIBS)

muser-cuda.so: $(BUILD)/muser-cuda.so
	cp $< $@.tmp && mv -f $@.tmp $@

$(BUILD)/muser-cuda.so: $(CUDA_OBJ)
	$(NVCC) -shared -cudart static $(CUDA_ARCH) -o $@ $^

$(BUILD)/src/gpu/%.o: src/gpu/%.cu src/gpu/cuda.cuh src/gpu/mm.cuh src/gpu/q8k.cuh src/gpu/gpu.h src/gpu/plugin.h src/kern/quant.h src/gpu/vit_index.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c -o $@ $<

$(LIB): $(LIB_OBJ) $(GEN_OBJ)
	@rm -f $@
	ar rcs $@ $^

# the dashboard page ships inside the binary (src/http/dash.c)
$(BUILD)/gen/dash_html.c: src/http/dash.html tools/embed.sh
	@mkdir -p $(dir $@)
	bash tools/embed.sh $< $@ mu_dash_html
$(BUILD)/gen/dash_html.o: $(BUILD)/gen/dash_html.c
	$(CC) $(CFLAGS) -c -o $@ $<

# the objects that print the commit are rebuilt when it changes
COMMIT_STAMP := $(BUILD)/commit-$(COMMIT)
$(COMMIT_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/commit-* && touch $@
$(BUILD)/cmd/muser/main.o $(BUILD)/cmd/muser/bench.o $(BUILD)/src/http/api_llamacpp.o: $(COMMIT_STAMP)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(FLAGS_$<) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(LIB) -lcmocka $(LDLIBS) $(TEST_LDLIBS)

unit: $(UNIT_BIN)

# a stand-in for muser-cuda.so (no CUDA): the engine's GPU side in the unit tier
$(BUILD)/tests/test_gpu_fake: $(BUILD)/tests/fake-gpu-plugin.so
$(BUILD)/tests/fake-gpu-plugin.so: tests/unit/fake_gpu_plugin.c tests/unit/fake_gpu_row.h tests/unit/fake_gpu_draft.h \
                                   src/gpu/plugin.h src/gpu/gpu.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -fPIC -fvisibility=hidden -o $@ $<

GPU_TEST_BIN := $(BUILD)/tests/gpu/test_gpu_kern $(BUILD)/tests/gpu/test_gpu_engine $(BUILD)/tests/gpu/test_gpu_stream \
                $(BUILD)/tests/gpu/test_gpu_vision $(BUILD)/tests/gpu/test_gpu_draft

test: muser $(CUDA_PLUGIN) $(UNIT_BIN) $(GPU_TEST_BIN)
	BUILD=$(BUILD) bash tests/run.sh

test-gpu: muser muser-cuda.so $(GPU_TEST_BIN)
	BUILD=$(BUILD) bash tests/gpu/run.sh

$(BUILD)/tests/gpu/%: tests/gpu/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# both scripts run even when the first fails
check:
	@rc=0; bash tools/check-layers.sh || rc=1; bash tools/check-paths.sh || rc=1; exit $$rc

asan:
	$(MAKE) BUILD=build/asan OPT=-O1 SAN="-fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize-recover=undefined" build/asan/muser unit

fuzz:
	bash tests/fuzz/build.sh

deps:
	bash tools/install-deps.sh

up:
	@if [ "$$(id -u)" = 0 ]; then bash tools/install-deps.sh; else bash tools/install-deps.sh --print; fi
	@$(MAKE) --no-print-directory muser
	./muser up $(UP_ARGS)

clean:
	rm -rf build muser muser-cuda.so

-include $(LIB_OBJ:.o=.d) $(CMD_OBJ:.o=.d) $(UNIT_BIN:=.d)
