#!/usr/bin/env python3
"""Writes the GGUF regression corpus: small hand-made files, each with one
defect the reader must refuse (bad_*.gguf), and a few valid ones it must
accept (ok_*.gguf). tests/test_gguf.c holds the expected status and message
for each; the fuzzer uses them as seeds. Only the standard library is used.

Usage: make_corpus.py [output folder]   (default: the folder of this script)

Inputs found by fuzzing are kept beside these as fuzz_*.gguf (copied
verbatim from libFuzzer's artifacts, not generated here).
"""
import os
import struct
import sys

# Metadata value types (glesc_gguf_type).
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
# Tensor types (ggml ids).
T_F32, T_F16, T_Q8_0, T_Q4_K = 0, 1, 8, 12

SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
              F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    """Encodes a value of type t (without the type field)."""
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(value(et, x) for x in items)
    return struct.pack(SCALAR_FMT[t], v)


def kv(key, t, v):
    return s(key) + struct.pack("<I", t) + value(t, v)


def tinfo(name, ne, ttype, offset):
    return (s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
            + struct.pack("<IQ", ttype, offset))


def header(n_tensors, n_kv, version=3, magic=b"GGUF"):
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def gguf(kvs=(), tensors=(), data=b"", alignment=32, version=3, pad=True):
    """A whole file: kvs are encoded entries, tensors encoded infos, data the
    bytes of the data section (placed after padding to the alignment)."""
    out = header(len(tensors), len(kvs), version) + b"".join(kvs) + b"".join(tensors)
    if pad or data:
        out += b"\0" * (-len(out) % alignment)
    return out + data


def f32s(n):
    return b"".join(struct.pack("<f", float(i)) for i in range(n))


ARCH = kv("general.architecture", STR, "llama")


def corpus():
    files = {}
    one_f32 = [tinfo("w", [4], T_F32, 0)]
    # ---- header ----
    files["bad_empty"] = b""
    files["bad_magic"] = b"GGUX" + gguf()[4:]
    files["bad_truncated_header"] = b"GGUF" + struct.pack("<I", 3) + b"\x01\0\0\0"
    files["bad_version1"] = b"GGUF" + struct.pack("<III", 1, 0, 0)
    files["bad_version99"] = header(0, 0, version=99)
    files["bad_big_endian"] = b"GGUF" + struct.pack(">IQQ", 3, 0, 0)
    files["bad_n_kv_absurd"] = header(0, 1 << 60) + ARCH
    files["bad_n_tensors_absurd"] = header(1 << 60, 1) + ARCH
    # ---- metadata ----
    files["bad_key_past_eof"] = header(0, 1) + struct.pack("<Q", 1 << 40) + b"general"
    files["bad_string_past_eof"] = (header(0, 1) + s("general.name") + struct.pack("<I", STR)
                                    + struct.pack("<Q", 1000) + b"short")
    files["bad_array_len_overflow"] = (header(0, 1) + s("a") + struct.pack("<I", ARR)
                                       + struct.pack("<IQ", U64, (1 << 61) + 1) + b"\0" * 64)
    files["bad_string_array_absurd"] = (header(0, 1) + s("tokenizer.ggml.tokens")
                                        + struct.pack("<I", ARR)
                                        + struct.pack("<IQ", STR, 1 << 60) + s("a") + s("b"))
    # Arrays nested 9 deep (the limit is 8); ok_all_types nests 3 deep.
    bomb = (U8, [1, 2])
    for _ in range(8):
        bomb = (ARR, [bomb])
    files["bad_array_depth_bomb"] = gguf([kv("bomb", ARR, bomb)])
    files["bad_unknown_value_type"] = header(0, 1) + s("x") + struct.pack("<I", 13) + b"\0" * 8
    files["bad_unknown_array_type"] = (header(0, 1) + s("x") + struct.pack("<I", ARR)
                                       + struct.pack("<IQ", 42, 1) + b"\0" * 8)
    files["bad_bool_value"] = header(0, 1) + s("flag") + struct.pack("<IB", BOOL, 2)
    files["bad_key_nul"] = gguf([kv(b"gen\0eral.name", STR, "x")])
    files["bad_duplicate_key"] = gguf([kv("general.name", STR, "a"), ARCH,
                                       kv("general.name", STR, "b")])
    files["bad_alignment0"] = gguf([kv("general.alignment", U32, 0)])
    files["bad_alignment3"] = gguf([kv("general.alignment", U32, 3)])
    files["bad_alignment_type"] = gguf([kv("general.alignment", STR, "32")])
    # ---- tensors ----
    # Two entries declared, the second cut short (but enough bytes for the count check).
    long_info = tinfo("weight_with_a_long_name", [4], T_F32, 0)
    files["bad_truncated_tensor_info"] = header(2, 1) + ARCH + long_info + long_info[:-6]
    files["bad_unknown_tensor_type"] = gguf([ARCH], [tinfo("w", [32], 4, 0)], b"\0" * 64)
    files["bad_n_dims5"] = gguf([ARCH], [tinfo("w", [1, 1, 1, 1, 1], T_F32, 0)], f32s(1))
    files["bad_n_dims0"] = gguf([ARCH], [tinfo("w", [], T_F32, 0)], f32s(16))
    files["bad_negative_ne"] = gguf([ARCH], [tinfo("w", [(1 << 64) - 1], T_F32, 0)], f32s(8))
    files["bad_ne_overflow"] = gguf([ARCH], [tinfo("w", [1 << 32, 1 << 32, 1 << 32], T_F32, 0)],
                                    f32s(8))
    files["bad_row_bytes_overflow"] = gguf([ARCH], [tinfo("w", [1 << 62], T_F32, 0)], f32s(8))
    files["bad_bytes_overflow"] = gguf([ARCH], [tinfo("w", [1 << 31, 1 << 31], T_F32, 0)],
                                       f32s(8))
    files["bad_row_not_block_multiple"] = gguf(
        [ARCH], [tinfo("blk.0.attn_q.weight", [33, 2], T_Q8_0, 0)], b"\0" * 160)
    files["bad_offset_unaligned"] = gguf([ARCH], [tinfo("a", [4], T_F32, 0),
                                                  tinfo("b", [4], T_F32, 16)], f32s(32))
    files["bad_offset_past_eof"] = gguf([ARCH], [tinfo("w", [4], T_F32, 64)], f32s(4))
    files["bad_size_past_eof"] = gguf([ARCH], [tinfo("w", [64], T_F32, 0)], f32s(4))
    files["bad_no_data_section"] = gguf([ARCH], one_f32, pad=False)
    files["bad_overlap"] = gguf([ARCH], [tinfo("a", [16], T_F32, 0), tinfo("b", [8], T_F32, 32),
                                         tinfo("c", [8], T_F32, 96)], f32s(32))
    files["bad_duplicate_tensor"] = gguf([ARCH], [tinfo("a", [8], T_F32, 0),
                                                  tinfo("a", [8], T_F32, 32)], f32s(16))
    files["bad_tensor_name_past_eof"] = (header(1, 0) + struct.pack("<Q", 1 << 62) + b"w" * 40)
    files["bad_overflow_offset"] = gguf([ARCH], [tinfo("w", [8], T_F32, (1 << 64) - 32)],
                                        f32s(8))
    # ---- valid ----
    files["ok_minimal"] = header(0, 0)
    files["ok_vocab_only"] = gguf([ARCH, kv("tokenizer.ggml.tokens", ARR,
                                            (STR, ["<unk>", "a", "", "\u2581b"]))], pad=False)
    all_kv = [
        kv("general.alignment", U32, 64), ARCH,
        kv("u8", U8, 200), kv("i8", I8, -100), kv("u16", U16, 60000), kv("i16", I16, -30000),
        kv("u32", U32, 4000000000), kv("i32", I32, -2000000000), kv("f32", F32, 1.5),
        kv("bool", BOOL, 1), kv("str", STR, "tab\there \"quoted\" \\ \x01 \xff".encode("latin-1")),
        kv("u64", U64, (1 << 64) - 1), kv("i64", I64, -(1 << 63)), kv("f64", F64, -2.25),
        kv("arr.i32", ARR, (I32, [1, -2, 3])), kv("arr.str", ARR, (STR, ["x", "", "zz"])),
        kv("arr.nested", ARR, (ARR, [(U8, [1, 2]), (STR, ["a"]), (ARR, [(F32, [0.5])])])),
        kv("arr.empty", ARR, (F64, [])),
    ]
    data = f32s(16) + b"\1" * 34 * 2 + b"\0" * (128 - 68) + b"\2" * 8 * 2
    files["ok_all_types"] = gguf(all_kv, [tinfo("f32", [16], T_F32, 0),
                                          tinfo("q8", [32, 2], T_Q8_0, 64),
                                          tinfo("f16", [4, 2], T_F16, 192)],
                                 data, alignment=64)
    files["bad_zero_dim"] = gguf([ARCH], [tinfo("w", [4], T_F32, 0),
                                          tinfo("empty", [256, 0], T_Q4_K, 32)], f32s(4))
    files["ok_version2"] = gguf([ARCH], one_f32, f32s(4), version=2)
    return files


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(corpus().items()):
        with open(os.path.join(out, name + ".gguf"), "wb") as fp:
            fp.write(data)
    print(f"wrote {len(corpus())} files to {out}")


if __name__ == "__main__":
    main()
