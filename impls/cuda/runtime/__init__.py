"""Running a CUDA kernel: its source and launch (launch), compiled by NVRTC (nvrtc) for a GPU
(on_device) or by g++ for the CPU with the sanitizers (cpu_build, on_cpu); execute picks."""
