// Shared helpers of the dequantizing snippets. Quantized weights live in a
// `uint` storage buffer named by the macro QW, block after block, each block
// repacked at upload to a whole number of words (see src/quant/gpu.c). Every
// type's snippet defines QK (elements per block), QWORDS (words per block)
// and `vec4 dq4(uint b, uint j)`: elements 4j .. 4j+3 of the block whose
// first word is b.

// Byte k of the block at word b.
uint qbyte(uint b, uint k) {
    return (QW[b + (k >> 2u)] >> ((k & 3u) * 8u)) & 0xffu;
}

// The four nibbles at bit sh of the four bytes of w (sh = 0: low nibbles).
vec4 nib4(uint w, uint sh) {
    return vec4((uvec4(w) >> uvec4(sh, sh + 8u, sh + 16u, sh + 24u)) & 0xfu);
}

// The four 2-bit fields at bit sh of the four bytes of w.
vec4 crumb4(uint w, uint sh) {
    return vec4((uvec4(w) >> uvec4(sh, sh + 8u, sh + 16u, sh + 24u)) & 3u);
}

// The four signed bytes of w.
vec4 int8x4(uint w) {
    ivec4 v = ivec4(uvec4(w) << uvec4(24u, 16u, 8u, 0u)) >> 24;
    return vec4(v);
}

// f16 in the low / high half of word w.
float f16lo(uint w) { return unpackHalf2x16(w).x; }
float f16hi(uint w) { return unpackHalf2x16(w).y; }
