// Provided by cuda_cpu.h (force-included by impls/cuda/runtime/cpu_build.py).
#pragma once
