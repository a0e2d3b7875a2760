/*
 * synth_model.c — writes a small synthetic llama model (tools/common/synth.h:
 * random weights, stories260K-like vocabulary, a ChatML chat template) to
 * the path given, for tests that need a model file but no shared one (the
 * embedding example).
 */
#include <stdio.h>

#include "common/synth.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: synth_model OUT.gguf\n");
        return 2;
    }
    synth_params p;
    synth_params_default(&p);
    p.n_embd = 64;
    p.n_layer = 2;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ff = 128;
    p.n_ctx = 512;
    p.weight_type = GLESC_DTYPE_Q8_0;
    p.chat_template = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' "
                      "+ message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";
    glesc_status st = synth_write(&p, argv[1]);
    if (st != GLESC_OK) {
        fprintf(stderr, "synth_model: %s: %s\n", argv[1], glesc_last_errmsg());
        return 1;
    }
    return 0;
}
