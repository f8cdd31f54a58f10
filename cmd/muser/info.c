/* info.c: `muser info -m MODEL`: geometry, tensor types and sizes, from
 * the public model API only; --check validates every weight (mu_model_check). */
#include <stdio.h>
#include <string.h>

#include "../../include/muser.h"
#include "cli.h"

/* The per-type totals print in the order of the GGUF type ids (F32 0, F16 1,
 * ... BF16 30), as they always have; a type not listed here follows them in
 * the order it first appears. */
static const char *const TYPE_ORDER[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
                                         "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "BF16"};
#define N_ORDER (int)(sizeof TYPE_ORDER / sizeof TYPE_ORDER[0])
#define MAX_TYPES 64

typedef struct {
    const char *name;
    int rank;
    size_t n, bytes;
} type_total;

static int type_rank(const char *name, int n_seen) {
    for (int i = 0; i < N_ORDER; i++)
        if (!strcmp(name, TYPE_ORDER[i])) return i;
    return N_ORDER + n_seen;
}

/* Adds a tensor to its type's total; false when there are too many types. */
static bool type_add(type_total *tt, int *n, const char *name, uint64_t bytes) {
    int i = 0;
    while (i < *n && strcmp(tt[i].name, name)) i++;
    if (i == *n) {
        if (*n == MAX_TYPES) return false;
        tt[i] = (type_total){name, type_rank(name, *n), 0, 0};
        (*n)++;
    }
    tt[i].n++;
    tt[i].bytes += bytes;
    return true;
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool tensors = false, check = false;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--tensors")) tensors = true;
        else if (!strcmp(argv[i], "--check")) check = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: muser info [-m MODEL] [--tensors] [--check]\n"
                   "  --check  read every weight: F32/F16/BF16 values and block scales must be finite\n");
            return 0;
        } else return cli_fail("muser info: unknown option '%s'", argv[i]);
    }
    if (!path && !(path = cli_default_model())) return 1;
    mu_err err = {0};
    mu_model *m;
    if (mu_model_open(path, &m, &err)) return cli_fail("muser info: %s", err.msg);
    const mu_model_info *I = mu_model_get_info(m);
    int n_swa = 0;
    for (int il = 0; il < I->n_layer; il++) n_swa += I->swa_layers[il];
    printf("file         %s (%llu bytes, GGUF v%u)\n", path, (unsigned long long)mu_model_file_bytes(m),
           mu_model_gguf_version(m));
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
    type_total tt[MAX_TYPES];
    int n_tt = 0;
    size_t total = 0;
    long long params = 0;
    for (int i = 0; i < mu_model_n_tensors(m); i++) {
        mu_tensor_info t;
        int rc = mu_model_tensor(m, i, &t, &err) ? cli_fail("muser info: %s", err.msg)
                 : !type_add(tt, &n_tt, t.type, t.bytes) ? cli_fail("muser info: more than %d tensor types", MAX_TYPES)
                                                          : 0;
        if (rc) {
            mu_model_close(m);
            return rc;
        }
        total += t.bytes;
        params += t.n_elems;
        if (tensors)
            printf("tensor       %-32s %-5s {%lld, %lld} %llu bytes\n", t.name, t.type, (long long)t.ne[0],
                   (long long)t.ne[1], (unsigned long long)t.bytes);
    }
    printf("parameters   %lld\n", params);
    for (int i = 1; i < n_tt; i++) /* insertion sort by rank (ranks are distinct) */
        for (int k = i; k > 0 && tt[k - 1].rank > tt[k].rank; k--) {
            type_total x = tt[k];
            tt[k] = tt[k - 1];
            tt[k - 1] = x;
        }
    for (int k = 0; k < n_tt; k++)
        printf("type %-7s %zu tensors, %.2f MiB\n", tt[k].name, tt[k].n, tt[k].bytes / 1048576.0);
    printf("weights      %.2f MiB\n", total / 1048576.0);
    mu_gpu_device gd[16];
    const int n_gpu = mu_gpu_devices(gd, 16);
    if (n_gpu == 0) printf("gpu          none: %s\n", mu_gpu_devices_why());
    for (int i = 0; i < n_gpu; i++)
        printf("gpu %-8d %s, compute %d.%d, %.1f of %.1f GiB free\n", i, gd[i].name, gd[i].major, gd[i].minor,
               gd[i].free_bytes / 1073741824.0, gd[i].total_bytes / 1073741824.0);
    printf("backend      %s (what --backend auto picks)\n", n_gpu ? "cuda" : "cpu");
    if (check) {
        fflush(stdout);
        if (cli_check_model("muser info", m, 0, true)) {
            mu_model_close(m);
            return 1;
        }
        printf("check        ok: every weight value and block scale is finite\n");
    }
    mu_model_close(m);
    return 0;
}
