/* info.c: `muser info -m MODEL`: geometry, tensor types and sizes. */
#include <stdio.h>
#include <string.h>

#include "../../include/muser.h"
#include "../../src/kern/quant.h"
#include "../../src/model/model.h"
#include "cli.h"

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool tensors = false;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--tensors")) tensors = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: muser info [-m MODEL] [--tensors]\n");
            return 0;
        } else return cli_fail("muser info: unknown option '%s'", argv[i]);
    }
    if (!path && !(path = cli_default_model())) return 1;
    mu_err err = {0};
    mu_model *m;
    if (mu_model_open(path, &m, &err)) return cli_fail("muser info: %s", err.msg);
    const mu_model_info *I = mu_model_get_info(m);
    const mu_gguf *g = mu_model_gguf(m);
    int n_swa = 0;
    for (int il = 0; il < I->n_layer; il++) n_swa += I->swa_layers[il];
    printf("file         %s (%zu bytes, GGUF v%u)\n", path, mu_gguf_file_bytes(g), mu_gguf_version(g));
    printf("name         %s\n", I->name);
    printf("layers       %d (%d sliding, %d full)\n", I->n_layer, n_swa, I->n_layer - n_swa);
    printf("pattern      ");
    for (int il = 0; il < I->n_layer; il++) putchar(I->swa_layers[il] ? 'S' : 'F');
    printf("\n");
    printf("n_embd       %d\nn_ff         %d\n", I->n_embd, I->n_ff);
    printf("heads        %d query / %d kv, head_dim %d\n", I->n_head, I->n_head_kv, I->head_dim);
    printf("vocab        %d\ncontext      %d\nwindow       %d\n", I->n_vocab, I->n_ctx_train, I->n_swa);
    printf("rope base    %g (sliding layers %g)\n", I->rope_base, I->rope_base_swa);
    printf("rms eps      %g\nlogit scale  %g\nsoftcap      %g\n", I->eps, I->logit_scale, I->softcap);
    printf("tokens       bos %d eos %d eot %d eom %d add_bos %s\n", I->bos, I->eos, I->eot, I->eom,
           I->add_bos ? "true" : "false");
    size_t by_type[MU_T_COUNT] = {0}, n_by_type[MU_T_COUNT] = {0}, total = 0;
    long long params = 0;
    for (int i = 0; i < mu_gguf_n_tensors(g); i++) {
        const mu_gguf_tensor *t = mu_gguf_tensor_at(g, i);
        by_type[t->type] += t->bytes;
        n_by_type[t->type]++;
        total += t->bytes;
        params += t->n_elems;
        if (tensors)
            printf("tensor       %-32s %-5s {%lld, %lld} %zu bytes\n", t->name, mu_type_get(t->type)->name,
                   (long long)t->ne[0], (long long)t->ne[1], t->bytes);
    }
    printf("parameters   %lld\n", params);
    for (int t = 0; t < MU_T_COUNT; t++)
        if (n_by_type[t])
            printf("type %-7s %zu tensors, %.2f MiB\n", mu_type_get((uint32_t)t)->name, n_by_type[t],
                   by_type[t] / 1048576.0);
    printf("weights      %.2f MiB\n", total / 1048576.0);
    mu_model_close(m);
    return 0;
}
