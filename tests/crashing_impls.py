"""Implementations that misbehave at the process level: kill it (as compiled code does on an out-of-bounds
access), hang where SIGALRM cannot reach, write to their inputs."""

from __future__ import annotations

import ctypes
import os
import signal
import time

import numpy as np


def _attention(q, k, v):
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v


def segfaults_past_three_queries(q, k, v):
    """Correct for n_q <= 3; reads address 0 (SIGSEGV) beyond, like a kernel indexing past its buffer."""
    if q.shape[2] > 3:
        ctypes.string_at(0)
    return _attention(q, k, v)


def aborts_on_two_heads(q, k, v):
    """Correct with one head; abort() (SIGABRT, a failed assert in C++) with more."""
    if q.shape[1] > 1:
        os.abort()
    return _attention(q, k, v)


def ignores_the_alarm(q, k, v):
    """Native code that never returns to Python ignores SIGALRM: modelled by ignoring it and sleeping."""
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    time.sleep(30)
    return _attention(q, k, v)


def writes_to_q(q, k, v):
    """Correct output, but it scales its input q in place."""
    out = _attention(q, k, v)
    q *= 2.0
    return out
