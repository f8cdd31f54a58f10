/* spec_cost.c: the draft-length cost model (spec_cost.h). */
#include "spec_cost.h"

int mu_spec_draft_len(const int *pos_acc, const int *pos_n, int k, double p_min) {
    double p = 1, q = 0.75;
    int n = 0;
    while (n < k) {
        q = (pos_acc[n] + 2 * q) / (pos_n[n] + 2.0);
        p *= q;
        if (p < p_min) break;
        n++;
    }
    return n;
}

double mu_spec_draft_expect(const int *pos_acc, const int *pos_n, int k) {
    double p = 1, q = 0.75, e = 0;
    for (int n = 0; n < k; n++) {
        q = (pos_acc[n] + 2 * q) / (pos_n[n] + 2.0);
        p *= q;
        e += p;
    }
    return e;
}

double mu_spec_solo_fixed(double p_min, bool device) { return device ? 0 : 1 - p_min; }

double mu_spec_batch_rate(int rows, double p_min) {
    if (rows < 1) rows = 1;
    return rows / ((1 - p_min) + p_min * rows);
}

int mu_spec_block_len(const int *pos_acc, const int *pos_n, int k, double cost_fixed, double cost_draft) {
    const int n = mu_spec_draft_len(pos_acc, pos_n, k, cost_draft);
    return n > 0 && mu_spec_draft_expect(pos_acc, pos_n, n) >= cost_fixed + cost_draft * n ? n : 0;
}
