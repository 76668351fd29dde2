// Devices: which backend a tensor lives on, and the few runtime calls the rest
// of the engine needs from CUDA without including CUDA headers.
//
// When the engine is built without CUDA, every CUDA entry point throws a clear
// error and cuda_device_count() is 0, so callers need no #ifdefs.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace engine {

bool built_with_cuda();
int cuda_device_count();  // 0 when not built with CUDA or no GPU is visible

// Makes `index` the current GPU of this process (one GPU per rank: the launcher
// passes the node-local rank modulo the visible device count).
void cuda_set_device(int index);
std::string cuda_device_name(int index);
// The PCI bus id of GPU `index` ("0000:1B:00.0"): the same physical GPU has the
// same id in every process of a node, whatever CUDA_VISIBLE_DEVICES renumbered.
std::string cuda_pci_bus_id(int index);
// Total memory of GPU `index` in bytes (0 in a CPU-only build): what a
// cluster description's memory_bytes holds (launch/plan/calibrate.h).
std::size_t cuda_device_memory_bytes(int index);
// Whether GPU `index` has the FP8 tensor cores the FP8 linear layers use
// (compute capability 8.9 or 9.x; engine/cuda/fp8_gemm.h). When not, *why
// (if given) names the GPU and what it has; false in a CPU-only build.
bool cuda_fp8_supported(int index, std::string* why = nullptr);
// Whether GPU `index` and the cuBLASLt loaded run block-scaled FP8 GEMMs
// (--fp8-scaling block: Hopper and cuBLAS 12.9 or later; engine/cuda/fp8_gemm.h).
bool cuda_fp8_block_scaling_supported(int index, std::string* why = nullptr);

// Bytes free on the current GPU now (cudaMemGetInfo): what a run's memory
// plan must fit in.
std::size_t cuda_free_bytes();

void* device_malloc(std::size_t bytes);
void device_free(void* ptr);
void device_synchronize();

// How the host waits for queued device work (device_synchronize, and
// copy_bytes into host memory). By default a blocking CUDA synchronisation.
// An installed waiter polls instead: it must return once `ready()` is true
// (ready() may throw), and `what` names the wait for messages. The NCCL
// communicators install one (parallel/nccl_communicator.h) so that a device
// stuck in a collective whose peer died ends the job through the collective
// watchdog instead of hanging in the driver. Only the thread that installed
// the waiter uses it (the watchdog answers MPI from that thread); an empty
// waiter restores blocking synchronisation. Nothing changes in a CPU run.
using DeviceWaiter = std::function<void(const std::function<bool()>& ready, const char* what)>;
void set_device_waiter(DeviceWaiter waiter);

// Timing marks for the asynchronous op timeline (engine/profiler.h).
// timing_mark() queues a mark behind the work already queued on the current
// stream and returns its number, counting from the last timing_marks_reset();
// it never waits for the device and never throws (-1 when a mark could not be
// recorded). A mark is a CUDA event when this process uses a GPU (at the
// reset), else a host clock reading, since CPU ops run synchronously.
// timing_marks_elapsed_ms() waits for the device and returns every mark's time
// in milliseconds after mark 0.
void timing_marks_reset();
int timing_mark();
std::vector<double> timing_marks_elapsed_ms();

// Host memory that device-to-host copies land in at full speed (checkpoint
// snapshots): page-locked (cudaMallocHost) when `device` is kCuda, so the copy
// needs no driver staging buffer; ordinary memory for kCpu. Free it with the
// same `device`.
void* host_staging_malloc(std::size_t bytes, DeviceType device);
void host_staging_free(void* ptr, DeviceType device);

// Copies `bytes` between any two of host/device memory.
void copy_bytes(void* dst, DeviceType dst_device, const void* src, DeviceType src_device,
                std::size_t bytes);

// Peak dense bf16 FLOP/s of a GPU by its name (H100/H200 989e12, A100 312e12);
// 0 when the name is not in the table.
double gpu_peak_flops_by_name(const std::string& name);

}  // namespace engine
