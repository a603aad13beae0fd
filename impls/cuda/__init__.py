"""CUDA kernels behind the implementation protocol: the .cu sources (kernels/), their Python faces (cuda_*.py,
each a device record and a CPU record: cuda_records), the tile geometry the checks reach past (geometry), the
catalogue every compiled kernel is listed in and its ptxas resources (kernel_catalogue, resources), the runtime
that runs a launch through CuPy on a device or through cpu/ on this CPU (runtime/), and the compile driver and GPU
limits of seed 002's kernels as written (seed_kernel_compiler, gpu_limits)."""
