// f32: one element per word; "blocks" of 4 elements for the dq4 interface.
#define QK 4u
#define QWORDS 4u
vec4 dq4(uint b, uint j) {
    return vec4(uintBitsToFloat(QW[b]), uintBitsToFloat(QW[b + 1u]),
                uintBitsToFloat(QW[b + 2u]), uintBitsToFloat(QW[b + 3u]));
}
