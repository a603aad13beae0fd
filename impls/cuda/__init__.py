"""CUDA kernels behind the implementation protocol: the .cu sources (kernels/), the launcher that runs them
through CuPy on a device or through the CPU execution of cpu/ everywhere, and their NVRTC compilation."""
