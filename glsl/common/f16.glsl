// Half-precision storage: two f16 values per uint, element i of an array of
// halves is in word i / 2, low half first (little endian, as in GGUF files).
float f16_at(uint word, uint i) {
    vec2 v = unpackHalf2x16(word);
    return (i & 1u) == 0u ? v.x : v.y;
}

// bf16 storage: the high 16 bits of an f32.
float bf16_at(uint word, uint i) {
    uint bits = (i & 1u) == 0u ? (word << 16) : (word & 0xffff0000u);
    return uintBitsToFloat(bits);
}
