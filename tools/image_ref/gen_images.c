/* gen_images: writes the test images of tests/unit/image_gen.h to files,
 * DIR/<name>.img, for llama.cpp's reference preprocessing (make_ref.sh).
 *   gen_images DIR */
#include "image_gen.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 1;
    }
    for (size_t i = 0; i < IG_N_CASES; i++) {
        ig_buf b = ig_cases[i].make();
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.img", argv[1], ig_cases[i].name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(b.p, 1, b.n, f) != b.n || fclose(f)) {
            perror(path);
            return 1;
        }
        free(b.p);
    }
    return 0;
}
