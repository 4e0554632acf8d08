#!/usr/bin/env python3
"""Golden frames of the sparse frame kinds and golden checkpoints, written from
docs/wire-format.md alone (no gradcomp code): CRC32C, Philox4x32-10, the random-k permutation,
the frame layout and the checkpoint envelope are re-implemented here. Prints C++ initializer
lists for tests/core/sparse_frames_test.cpp and tests/core/envelope_test.cpp."""
import struct

def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF

M32 = 0xFFFFFFFF

def philox(ctr, key):
    c, k0, k1 = list(ctr), key[0], key[1]
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c[3] ^ k1) & M32, p0 & M32]
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c

def fmix(h):
    h ^= h >> 16; h = (h * 0x85EBCA6B) & M32; h ^= h >> 13; h = (h * 0xC2B2AE35) & M32; h ^= h >> 16
    return h

def permutation(n, seed, step, chunk):
    bits = max(0, (n - 1).bit_length()) if n > 1 else 0
    half = 1 if bits < 2 else (bits + 1) // 2
    mask = (1 << half) - 1
    keys = philox([0, 0, chunk, 3], [seed, step & M32]) + philox([1, 0, chunk, 3], [seed, step & M32])
    def apply(x):
        left, right = x >> half, x & mask
        for r in range(6):
            left, right = right, left ^ (fmix(right ^ keys[r]) & mask)
        return (left << half) | right
    def pi(i):
        x = apply(i)
        while x >= n:
            x = apply(x)
        return x
    return pi

def bf16(x):
    u = struct.unpack('<I', struct.pack('<f', x))[0]
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16

def pad8(b):
    return b + bytes((-len(b)) % 8)

def frame(codec, fmt, dense, kept, index, values, step=0, chunk=0, offset=0, dtype=1):
    h = struct.pack('<IHHIBBHIIQQQQQQQI', 0x52464347, 1, 88, codec, dtype, fmt, 0, chunk, 0, step, offset, dense, kept,
                    0, len(index), len(values), 0)
    body = pad8(index) + pad8(values)
    return h + struct.pack('<I', crc32c(h + body)) + body

def bitmap(idx, n):
    b = bytearray((n + 7) // 8)
    for i in idx:
        b[i // 8] |= 1 << (i % 8)
    return bytes(b)

def delta(idx):
    gaps = [idx[0]] + [idx[m] - idx[m - 1] - 1 for m in range(1, len(idx))]
    w = max(gaps).bit_length()
    acc = sum(g << (m * w) for m, g in enumerate(gaps))
    return bytes([w]) + bytes(7) + acc.to_bytes((len(idx) * w + 7) // 8, 'little')

def show(name, f):
    print(f'// {name}: {len(f)} bytes')
    print(', '.join(f'0x{b:02x}' for b in f))

small = [0.5, -3.0, 0.0, 1.25, -0.0625]
# top-k (density 0.4) + bf16: indices 1, 3 as a bitmap
show('topk_bf16_bitmap', frame(0x02020000, 3, 5, 2, bitmap([1, 3], 5), b''.join(struct.pack('<H', bf16(small[i])) for i in [1, 3])))
# top-k (density 0.015) + fp32 over 200 values, nonzero at 2, 9, 150: delta gaps 2, 6, 140 at 8 bits
x = [0.0] * 200
x[2], x[9], x[150] = 1.0, -2.0, 0.5
show('topk_none_delta', frame(0x02010000, 2, 200, 3, delta([2, 9, 150]), b''.join(struct.pack('<f', x[i]) for i in [2, 9, 150])))
# random-k (density 0.3, seed 7, step 0) + bf16 over x_i = i / 2 - 2, i < 10: values at pi(0), pi(1), pi(2)
pi = permutation(10, 7, 0, 0)
r = [i / 2 - 2 for i in range(10)]
print('// random-k positions', [pi(m) for m in range(3)])
show('randomk_bf16', frame(0x04020000, 4, 10, 3, struct.pack('<II', 7, 0), b''.join(struct.pack('<H', bf16(r[pi(m)])) for m in range(3))))
# row top-k (cols 4, k 1) + fp32 over rows [1,-5,2,0] [0,0,3,-3] [-1,1]: indices 1, 6, 8
y = [1, -5, 2, 0, 0, 0, 3, -3, -1, 1]
show('row_topk_none', frame(0x05010000, 3, 10, 3, bitmap([1, 6, 8], 10), b''.join(struct.pack('<f', y[i]) for i in [1, 6, 8])))
# threshold at density 1 + bf16 over the small input: everything, as a bitmap
show('threshold_bf16_all', frame(0x03020000, 3, 5, 5, bitmap(range(5), 5), b''.join(struct.pack('<H', bf16(v)) for v in small)))

def envelope(magic, version, payload):
    head = magic + struct.pack('<HHQ', version, 0, len(payload))
    return head + payload + struct.pack('<I', crc32c(head + payload))

def f32s(v):
    return b''.join(struct.pack('<f', x) for x in v)

# Checkpoint version 3 of a top-k + bf16 state (codec 0x02020000): size 3, step 5, residual only.
res = [1.0, -2.0, 0.5]
show('checkpoint_v3', envelope(b'GCST', 3, struct.pack('<QQQQQI', 3, 5, 3, 0, 0, 0x02020000) + f32s(res)))
# TAGC checkpoint version 2 of rank 1 of 2 (default config: codec 0xab5484f6, fingerprint
# 0x1658b0f9): size 3, step 4, key 0x01020304, thresholds [0.25, 0], the same residual.
show('tagc_checkpoint_v2', envelope(b'GCTC', 2, struct.pack('<IIQIIQIIQ', 0xab5484f6, 0x1658b0f9, 3, 2, 1, 4, 0x01020304, 2, 3)
                                     + f32s([0.25, 0.0]) + f32s(res)))
