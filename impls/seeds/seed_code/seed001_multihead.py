"""Seed 001 § 1.3: the multi-head pseudo-code, exactly as written, as text.

It does not run as written (`assert hdim % head_dim = 0` is a SyntaxError), so it is kept as source that the
properties compile and execute; impls/seeds/seed001_multihead_record.py is the record with the two named repairs.
"""

PSEUDO_CODE = """\
q_len, k_len, v_len = 3, 4, 4
batch_size, hdim = 2, 512
head_dim = 64
assert hdim % head_dim = 0
assert k_len == v_len
num_head = hdim // head_dim
"""  # seed 001 § 1.3, the lines that run before `tensor(...)` (its sizes filled in)

SEED_SPLIT_MERGE = """\
def multi_head_split(x):
  # x: (batch_size, len, hdim)
  b, l, hdim = x.size()
  x = x.reshape(b, l, num_head, head_dim).transpose(1, 2)    # (b, num_head, l, dim)
  return x


def multi_head_merge(x, b):
  # x: (batch_ize, num_head, len, head_dim)
  b, num_head, l, head_dim = x.size()
  x = x.transpose(1, 2).reshape(b, l, num_head * head_dim)    #(batch_size, l, hdim)
  return x
"""  # seed 001 § 1.3 verbatim (tests/unit/test_weak_checks.py compares it with the seed file)
