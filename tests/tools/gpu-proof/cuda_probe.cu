// What a container sees of its GPUs through CUDA, for scripts/gpu-proof.sh: the devices (count,
// PCI bus ID, UUID, name) and one kernel run on device 0 whose result is checked on the host.
// Built on the GPU machine with its nvcc; exits 0 only when the kernel's result is right.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

__global__ void Square(unsigned* values, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) values[i] = i * i;
}

static bool Ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::printf("error %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

int main() {
  int count = 0;
  if (!Ok(cudaGetDeviceCount(&count), "cudaGetDeviceCount")) return 2;
  std::printf("devices %d\n", count);
  for (int d = 0; d < count; ++d) {
    char bus[32] = {};
    cudaDeviceProp prop{};
    if (!Ok(cudaDeviceGetPCIBusId(bus, sizeof bus, d), "cudaDeviceGetPCIBusId") ||
        !Ok(cudaGetDeviceProperties(&prop, d), "cudaGetDeviceProperties"))
      return 2;
    const unsigned char* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    std::printf(
        "device %d bus %s uuid GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
        "%02x%02x%02x%02x%02x%02x name %s\n",
        d, bus, u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
        u[13], u[14], u[15], prop.name);
  }
  if (count == 0) return 3;
  const unsigned n = 1u << 20;
  unsigned* values = nullptr;
  std::vector<unsigned> host(n);
  if (!Ok(cudaMalloc(&values, n * sizeof(unsigned)), "cudaMalloc")) return 2;
  Square<<<(n + 255) / 256, 256>>>(values, n);
  if (!Ok(cudaGetLastError(), "kernel launch") || !Ok(cudaDeviceSynchronize(), "kernel") ||
      !Ok(cudaMemcpy(host.data(), values, n * sizeof(unsigned), cudaMemcpyDeviceToHost),
          "cudaMemcpy"))
    return 2;
  cudaFree(values);
  for (unsigned i = 0; i < n; ++i) {
    if (host[i] != i * i) {
      std::printf("kernel wrong at %u: %u\n", i, host[i]);
      return 4;
    }
  }
  std::printf("kernel ok (%u squares)\n", n);
  return 0;
}
