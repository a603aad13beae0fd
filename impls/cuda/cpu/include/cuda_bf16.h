// Provided by cuda_cpu.h (force-included by impls/cuda/cpu_build.py).
#pragma once
