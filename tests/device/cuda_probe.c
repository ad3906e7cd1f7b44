/* cuda_probe: a CUDA client for checking MPS limits on a real GPU with nothing but the driver.
 * It dlopen()s libcuda.so.1 (the driver API, which every NVIDIA driver installs) and JIT-loads
 * PTX embedded below with cuModuleLoadData, so no CUDA toolkit, runtime or compiler is needed
 * where it runs. Built with the rest of tessera (plain C, libc and libdl only).
 *
 *   cuda_probe info                      device, SMs, memory free/total
 *   cuda_probe alloc-until-oom [MIB]     allocate MIB-sized chunks (default 256, then 16) until
 *                                        refused; prints allocated_mib= and the refusing error
 *   cuda_probe spin SECONDS              launch a fixed, GPU-filling kernel for SECONDS; prints
 *                                        kernels=, kernel_ms= (mean) and the first error seen
 *   cuda_probe fault                     write to an illegal address; prints what synchronize said
 *   cuda_probe hold MIB SECONDS          hold MIB of device memory, launching a small kernel every
 *                                        100 ms; prints the first error seen (what a bystander
 * sees) cuda_probe context                   create a context and say whether that worked
 *
 * Every line of output is "key=value ..." so the check script can grep it. Exit status 0 when the
 * mode did what it measures (an OOM or a fault is the expected outcome of those modes), 1 when
 * the driver could not be used at all, 2 on a usage error. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef unsigned long long CUdeviceptr;

#define CUDA_SUCCESS 0
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16

static struct {
  CUresult (*init)(unsigned int);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*device_name)(char*, int, CUdevice);
  CUresult (*device_attribute)(int*, int, CUdevice);
  CUresult (*primary_retain)(CUcontext*, CUdevice);
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*ctx_synchronize)(void);
  CUresult (*module_load_data)(CUmodule*, const void*);
  CUresult (*module_function)(CUfunction*, CUmodule, const char*);
  CUresult (*launch)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                     unsigned int, unsigned int, unsigned int, void*, void**, void**);
  CUresult (*mem_alloc)(CUdeviceptr*, size_t);
  CUresult (*mem_free)(CUdeviceptr);
  CUresult (*mem_info)(size_t*, size_t*);
  CUresult (*error_name)(CUresult, const char**);
} cu;

/* PTX ISA 7.0 for sm_70: the driver JIT-compiles it for any newer GPU (an H100 is sm_90). */
static const char kPtx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry spin(.param .u64 out, .param .u32 iterations)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<8>;\n"
    "  .reg .f32 %f<4>;\n"
    "  .reg .b64 %rd<4>;\n"
    "  ld.param.u64 %rd1, [out];\n"
    "  ld.param.u32 %r1, [iterations];\n"
    "  mov.u32 %r2, %tid.x;\n"
    "  mov.u32 %r3, %ctaid.x;\n"
    "  mov.u32 %r4, %ntid.x;\n"
    "  mad.lo.u32 %r5, %r3, %r4, %r2;\n"
    "  cvt.rn.f32.u32 %f1, %r5;\n"
    "  mov.f32 %f2, 0f3F800000;\n"
    "LOOP:\n"
    "  setp.eq.u32 %p1, %r1, 0;\n"
    "  @%p1 bra DONE;\n"
    "  fma.rn.f32 %f1, %f1, 0f3F7FFFFF, %f2;\n"
    "  sub.u32 %r1, %r1, 1;\n"
    "  bra LOOP;\n"
    "DONE:\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mul.wide.u32 %rd3, %r5, 4;\n"
    "  add.u64 %rd2, %rd2, %rd3;\n"
    "  st.global.f32 [%rd2], %f1;\n"
    "  ret;\n"
    "}\n"
    "\n"
    ".visible .entry fault()\n"
    "{\n"
    "  .reg .b32 %r<2>;\n"
    "  .reg .b64 %rd<2>;\n"
    "  mov.u64 %rd1, 8;\n"
    "  mov.u32 %r1, 1;\n"
    "  st.global.u32 [%rd1], %r1;\n"
    "  ret;\n"
    "}\n";

static const char* Name(CUresult r) {
  const char* name = NULL;
  if (cu.error_name && cu.error_name(r, &name) == CUDA_SUCCESS && name) return name;
  static char fallback[32];
  snprintf(fallback, sizeof fallback, "CUDA_ERROR_%d", r);
  return fallback;
}

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

#define BIND(field, symbol)                               \
  do {                                                    \
    *(void**)(&cu.field) = dlsym(library, symbol);        \
    if (!cu.field) {                                      \
      printf("error=missing_symbol symbol=%s\n", symbol); \
      return 1;                                           \
    }                                                     \
  } while (0)

static int Load(void) {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    printf("error=no_libcuda detail=\"%s\"\n", dlerror());
    return 1;
  }
  BIND(init, "cuInit");
  BIND(device_get, "cuDeviceGet");
  BIND(device_name, "cuDeviceGetName");
  BIND(device_attribute, "cuDeviceGetAttribute");
  BIND(primary_retain, "cuDevicePrimaryCtxRetain");
  BIND(ctx_set_current, "cuCtxSetCurrent");
  BIND(ctx_synchronize, "cuCtxSynchronize");
  BIND(module_load_data, "cuModuleLoadData");
  BIND(module_function, "cuModuleGetFunction");
  BIND(launch, "cuLaunchKernel");
  BIND(mem_alloc, "cuMemAlloc_v2");
  BIND(mem_free, "cuMemFree_v2");
  BIND(mem_info, "cuMemGetInfo_v2");
  BIND(error_name, "cuGetErrorName");
  return 0;
}

static CUdevice device;
static int sms;

/* Context on device 0 (the one GPU the client sees). Prints the failing call. */
static int Context(void) {
  CUresult r = cu.init(0);
  if (r != CUDA_SUCCESS) {
    printf("error=%s call=cuInit\n", Name(r));
    return 1;
  }
  if ((r = cu.device_get(&device, 0)) != CUDA_SUCCESS) {
    printf("error=%s call=cuDeviceGet\n", Name(r));
    return 1;
  }
  CUcontext context = NULL;
  if ((r = cu.primary_retain(&context, device)) != CUDA_SUCCESS) {
    printf("error=%s call=cuDevicePrimaryCtxRetain\n", Name(r));
    return 1;
  }
  if ((r = cu.ctx_set_current(context)) != CUDA_SUCCESS) {
    printf("error=%s call=cuCtxSetCurrent\n", Name(r));
    return 1;
  }
  cu.device_attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  return 0;
}

static int Function(const char* name, CUfunction* out) {
  static CUmodule module = NULL;
  CUresult r;
  if (!module && (r = cu.module_load_data(&module, kPtx)) != CUDA_SUCCESS) {
    printf("error=%s call=cuModuleLoadData\n", Name(r));
    return 1;
  }
  if ((r = cu.module_function(out, module, name)) != CUDA_SUCCESS) {
    printf("error=%s call=cuModuleGetFunction\n", Name(r));
    return 1;
  }
  return 0;
}

static int Info(void) {
  char name[256] = "";
  cu.device_name(name, sizeof name, device);
  size_t free_bytes = 0, total = 0;
  CUresult r = cu.mem_info(&free_bytes, &total);
  printf("device=\"%s\" sms=%d free_mib=%zu total_mib=%zu mem_info=%s mps_pipe=%s\n", name, sms,
         free_bytes >> 20, total >> 20, Name(r),
         getenv("CUDA_MPS_PIPE_DIRECTORY") ? getenv("CUDA_MPS_PIPE_DIRECTORY") : "-");
  return 0;
}

static int AllocUntilOom(size_t chunk_mib) {
  size_t allocated = 0;
  CUresult last = CUDA_SUCCESS;
  for (size_t chunk = chunk_mib; chunk >= 16; chunk /= 4) {
    for (;;) {
      CUdeviceptr pointer = 0;
      last = cu.mem_alloc(&pointer, chunk << 20);
      if (last != CUDA_SUCCESS) break;
      allocated += chunk;
      if (allocated > (size_t)4 << 20) break; /* 4 TiB: something is wrong */
    }
  }
  printf("allocated_mib=%zu refused_by=%s limit_env=%s\n", allocated, Name(last),
         getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") ? getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
                                                    : "-");
  fflush(stdout);
  /* Keep the memory until the check script has looked (nvidia-smi, get_client_list). */
  const char* hold = getenv("PROBE_HOLD_SECONDS");
  if (hold) sleep((unsigned)atoi(hold));
  return 0;
}

static int Spin(double seconds) {
  CUfunction spin;
  if (Function("spin", &spin)) return 1;
  const unsigned int threads = 256, blocks = (unsigned int)(sms > 0 ? sms : 1) * 8;
  CUdeviceptr out = 0;
  CUresult r = cu.mem_alloc(&out, (size_t)threads * blocks * sizeof(float));
  if (r != CUDA_SUCCESS) {
    printf("error=%s call=cuMemAlloc\n", Name(r));
    return 1;
  }
  unsigned int iterations = 200000;
  void* params[] = {&out, &iterations};
  long kernels = 0;
  double busy = 0;
  const double start = Now();
  CUresult first_error = CUDA_SUCCESS;
  while (Now() - start < seconds) {
    const double t0 = Now();
    r = cu.launch(spin, blocks, 1, 1, threads, 1, 1, 0, NULL, params, NULL);
    if (r == CUDA_SUCCESS) r = cu.ctx_synchronize();
    if (r != CUDA_SUCCESS) {
      first_error = r;
      break;
    }
    busy += Now() - t0;
    ++kernels;
  }
  printf(
      "kernels=%ld kernel_ms=%.3f seconds=%.3f blocks=%u threads=%u first_error=%s "
      "thread_pct_env=%s\n",
      kernels, kernels ? busy * 1000.0 / (double)kernels : 0.0, Now() - start, blocks, threads,
      first_error == CUDA_SUCCESS ? "none" : Name(first_error),
      getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") ? getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
                                                  : "-");
  return first_error == CUDA_SUCCESS ? 0 : 1;
}

static int Fault(void) {
  CUfunction fault;
  if (Function("fault", &fault)) return 1;
  CUresult launched = cu.launch(fault, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
  CUresult synced = cu.ctx_synchronize();
  printf("launch=%s synchronize=%s\n", Name(launched), Name(synced));
  return synced != CUDA_SUCCESS ? 0 : 1;
}

static int Hold(size_t mib, double seconds) {
  CUdeviceptr pointer = 0;
  CUresult r = cu.mem_alloc(&pointer, mib << 20);
  if (r != CUDA_SUCCESS) {
    printf("error=%s call=cuMemAlloc mib=%zu\n", Name(r), mib);
    return 1;
  }
  CUfunction spin;
  if (Function("spin", &spin)) return 1;
  unsigned int iterations = 1000;
  void* params[] = {&pointer, &iterations};
  const double start = Now();
  CUresult first_error = CUDA_SUCCESS;
  double error_at = 0;
  while (Now() - start < seconds) {
    r = cu.launch(spin, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
    if (r == CUDA_SUCCESS) r = cu.ctx_synchronize();
    if (r != CUDA_SUCCESS && first_error == CUDA_SUCCESS) {
      first_error = r;
      error_at = Now() - start;
      break;
    }
    usleep(100 * 1000);
  }
  printf("held_mib=%zu first_error=%s error_after_s=%.3f\n", mib,
         first_error == CUDA_SUCCESS ? "none" : Name(first_error), error_at);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr,
            "usage: cuda_probe info|alloc-until-oom [MIB]|spin S|fault|hold MIB S|context\n");
    return 2;
  }
  const char* mode = argv[1];
  const char* modes[] = {"info", "context", "alloc-until-oom", "spin", "fault", "hold"};
  int known = 0;
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; ++i)
    known |= strcmp(mode, modes[i]) == 0;
  if (!known || (strcmp(mode, "spin") == 0 && argc < 3) ||
      (strcmp(mode, "hold") == 0 && argc < 4)) {
    fprintf(stderr, "cuda_probe: unknown mode or missing arguments: %s\n", mode);
    return 2;
  }
  if (Load()) return 1;
  if (Context()) return 1;
  if (strcmp(mode, "info") == 0) return Info();
  if (strcmp(mode, "context") == 0) {
    printf("context=ok sms=%d\n", sms);
    return 0;
  }
  if (strcmp(mode, "alloc-until-oom") == 0)
    return AllocUntilOom(argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 256);
  if (strcmp(mode, "spin") == 0 && argc > 2) return Spin(atof(argv[2]));
  if (strcmp(mode, "fault") == 0) return Fault();
  if (strcmp(mode, "hold") == 0 && argc > 3)
    return Hold((size_t)strtoul(argv[2], NULL, 10), atof(argv[3]));
  fprintf(stderr, "cuda_probe: unknown mode %s\n", mode);
  return 2;
}
