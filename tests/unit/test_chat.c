/* test_chat.c: the built-in Muse format and the assistant-output parser.
 * Rendering is checked against jinja2's output in tests/jinja/expected; the
 * parser is fed every case whole, split at every byte boundary, and byte by
 * byte, and must give the same reasoning/content/tool calls each time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/chat/chat.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    b[*n] = 0;
    fclose(f);
    return b;
}

/* ---------------------------------------------------------------- rendering */
static void test_template_in_step(void **state) {
    (void)state;
    size_t n;
    char *file = slurp("tests/jinja/templates/muse.jinja", &n);
    assert_non_null(file);
    assert_int_equal(strlen(mu_chat_muse_template()), n);
    assert_memory_equal(mu_chat_muse_template(), file, n);
    free(file);
}

static void render_ctx_file(const char *ctx_path, const char *expected_path, bool string_args) {
    json_t *ctx = json_load_file(ctx_path, 0, NULL);
    assert_non_null(ctx);
    json_t *msgs = json_object_get(ctx, "messages");
    if (string_args) { /* OpenAI shape: arguments as JSON text */
        size_t i;
        json_t *m;
        json_array_foreach(msgs, i, m) {
            size_t j;
            json_t *c;
            json_array_foreach(json_object_get(m, "tool_calls"), j, c) {
                json_t *fn = json_object_get(c, "function");
                char *s = json_dumps(json_object_get(fn, "arguments"), JSON_COMPACT | JSON_PRESERVE_ORDER);
                json_object_set_new(fn, "arguments", json_string(s));
                free(s);
            }
        }
    }
    const char *rs = json_string_value(json_object_get(ctx, "reasoning_strength"));
    char *out = NULL;
    mu_err err = {0};
    int rc = mu_chat_render(NULL, msgs, json_object_get(ctx, "tools"), rs,
                            json_is_true(json_object_get(ctx, "add_generation_prompt")),
                            json_string_value(json_object_get(ctx, "bos_token")), NULL, &out, &err);
    if (rc) fprintf(stderr, "render failed: %s\n", err.msg);
    assert_int_equal(rc, 0);
    size_t n;
    char *want = slurp(expected_path, &n);
    assert_non_null(want);
    assert_string_equal(out, want);
    free(out);
    free(want);
    json_decref(ctx);
}

static void test_render_builtin(void **state) {
    (void)state;
    render_ctx_file("tests/jinja/contexts/muse_agent.json", "tests/jinja/expected/muse.muse_agent.out", false);
    render_ctx_file("tests/jinja/contexts/muse_agent.json", "tests/jinja/expected/muse.muse_agent.out", true);
    render_ctx_file("tests/jinja/contexts/muse_low.json", "tests/jinja/expected/muse.muse_low.out", false);
}

static void test_render_errors(void **state) {
    (void)state;
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, NULL);
    char *out = NULL;
    mu_err err = {0};
    assert_int_equal(mu_chat_render(NULL, msgs, NULL, "extreme", true, NULL, NULL, &out, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "extreme"));
    assert_int_equal(mu_chat_render("{% if %}", msgs, NULL, NULL, true, NULL, NULL, &out, &err), MU_E_FORMAT);
    json_t *bad = json_loads("[{\"content\": \"no role\"}]", 0, NULL);
    assert_int_equal(mu_chat_render(NULL, bad, NULL, NULL, true, NULL, NULL, &out, &err), MU_E_ARG);
    json_t *weird = json_loads("[{\"role\": \"wizard\", \"content\": \"x\"}]", 0, NULL);
    assert_int_equal(mu_chat_render(NULL, weird, NULL, NULL, true, NULL, NULL, &out, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "unknown role wizard"));
    /* defaults: high strength, default system block, generation prompt */
    assert_int_equal(mu_chat_render(NULL, msgs, NULL, NULL, true, NULL, NULL, &out, &err), 0);
    assert_string_equal(out, "<|begin_of_text|><|start|>system<|message|>You are Muse, a helpful assistant.\n\n"
                             "Reasoning strength: high.<|eot|><|start|>user<|message|>hi<|eot|><|start|>assistant");
    free(out);
    json_decref(msgs);
    json_decref(bad);
    json_decref(weird);
}

/* ---------------------------------------------------------------- parsing */
typedef struct {
    char reasoning[4096], content[4096], calls[4096];
    size_t rn, cn, kn;
    int n_events;
} collect;

static int on_event(void *user, const mu_chat_event *ev) {
    collect *c = user;
    c->n_events++;
    if (ev->kind == MU_CHAT_REASONING) {
        assert_true(c->rn + ev->len < sizeof c->reasoning);
        memcpy(c->reasoning + c->rn, ev->text, ev->len);
        c->rn += ev->len;
    } else if (ev->kind == MU_CHAT_CONTENT) {
        assert_true(c->cn + ev->len < sizeof c->content);
        memcpy(c->content + c->cn, ev->text, ev->len);
        c->cn += ev->len;
    } else {
        c->kn += (size_t)snprintf(c->calls + c->kn, sizeof c->calls - c->kn, "%d:%s%s;", ev->index, ev->name,
                                  ev->arguments);
    }
    return 0;
}

static void run_chunks(const char *text, const size_t *cuts, int n_cuts, collect *c) {
    memset(c, 0, sizeof *c);
    mu_chat_parser *p;
    mu_err err = {0};
    assert_int_equal(mu_chat_parser_new(&p, &err), 0);
    size_t len = strlen(text), prev = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t at = i < n_cuts ? cuts[i] : len;
        assert_int_equal(mu_chat_parser_feed(p, text + prev, at - prev, on_event, c, &err), 0);
        prev = at;
    }
    assert_int_equal(mu_chat_parser_finish(p, on_event, c, &err), 0);
    mu_chat_parser_free(p);
}

static void check_case(const char *text, const char *reasoning, const char *content, const char *calls) {
    collect c;
    size_t len = strlen(text);
    for (size_t split = 0; split <= len; split++) { /* whole (split 0) and two chunks at every boundary */
        run_chunks(text, &split, 1, &c);
        if (strlen(reasoning) != c.rn || memcmp(c.reasoning, reasoning, c.rn) || strlen(content) != c.cn ||
            memcmp(c.content, content, c.cn) || strcmp(c.calls, calls)) {
            fprintf(stderr, "split at %zu of %s\n reasoning [%.*s]\n content [%.*s]\n calls [%s]\n", split, text,
                    (int)c.rn, c.reasoning, (int)c.cn, c.content, c.calls);
            fail();
        }
    }
    size_t *cuts = malloc(len * sizeof *cuts); /* byte by byte */
    for (size_t i = 0; i < len; i++) cuts[i] = i;
    run_chunks(text, cuts, (int)len, &c);
    free(cuts);
    assert_int_equal(c.rn, strlen(reasoning));
    assert_memory_equal(c.reasoning, reasoning, c.rn);
    assert_int_equal(c.cn, strlen(content));
    assert_memory_equal(c.content, content, c.cn);
    assert_string_equal(c.calls, calls);
}

static void test_parse_channels(void **state) {
    (void)state;
    check_case(" to=self<|message|>Let me think.<|eom|><|start|>assistant to=user<|message|>The answer is 4.<|eot|>",
               "Let me think.", "The answer is 4.", "");
    check_case(" to=user<|message|>Just an answer.<|end_of_text|>ignored", "", "Just an answer.", "");
    check_case(" to=user<|message|>a <| b <|eo c <|eotx|> d <|start|x<|eot|>", "", "a <| b <|eo c <|eotx|> d <|start|x",
               "");
    check_case(" to=user<|message|>cut off <|eo", "", "cut off <|eo", "");       /* finish flushes */
    check_case("No header at all.<|eot|>", "", "No header at all.", "");
    check_case(" to=self<|message|>r1<|eom|><|start|>assistant to=self<|message|>r2<|eom|><|start|>assistant to=user<|message|>ü€😀<|eot|>",
               "r1r2", "ü€😀", "");
    check_case(" to=user<|message|>x<|eot|><|start|>assistant to=user<|message|>after end", "", "x", "");
}

static void test_parse_tools(void **state) {
    (void)state;
    check_case(" to=self<|message|>Need weather<|eom|><|start|>assistant to=get_weather<|message|>"
               "<atem:function_calls><atem:invoke name=\"get_weather\">"
               "<atem:parameter name=\"city\">Paris</atem:parameter>"
               "<atem:parameter name=\"days\">3</atem:parameter>"
               "<atem:parameter name=\"opts\">{\"unit\": \"C\"}</atem:parameter>"
               "<atem:parameter name=\"tags\">[\"a\", 1]</atem:parameter>"
               "<atem:parameter name=\"flag\">true</atem:parameter>"
               "<atem:parameter name=\"none\">null</atem:parameter>"
               "<atem:parameter name=\"q\">\"quoted\"</atem:parameter>"
               "<atem:parameter name=\"text\">two words</atem:parameter>"
               "</atem:invoke></atem:function_calls><|eot|>",
               "Need weather", "",
               "0:get_weather{\"city\":\"Paris\",\"days\":3,\"opts\":{\"unit\":\"C\"},\"tags\":[\"a\",1],"
               "\"flag\":true,\"none\":null,\"q\":\"\\\"quoted\\\"\",\"text\":\"two words\"};");
    /* two calls: one per message, and two invokes in one block */
    check_case(" to=a<|message|><atem:function_calls><atem:invoke name=\"a\"></atem:invoke></atem:function_calls><|eom|>"
               "<|start|>assistant to=b<|message|><atem:function_calls><atem:invoke name=\"b\"><atem:parameter name=\"x\">1.5</atem:parameter></atem:invoke>"
               "<atem:invoke name=\"c\"><atem:parameter name=\"y\">-2</atem:parameter></atem:invoke></atem:function_calls><|eot|>",
               "", "", "0:a{};1:b{\"x\":1.5};2:c{\"y\":-2};");
    /* a broken block is kept as content */
    check_case(" to=f<|message|><atem:function_calls><atem:invoke name=\"f\"><atem:parameter name=\"x\">1</atem:invoke><|eot|>",
               "", "<atem:function_calls><atem:invoke name=\"f\"><atem:parameter name=\"x\">1</atem:invoke>", "");
    check_case(" to=f<|message|>not atem at all<|eot|>", "", "not atem at all", "");
}

static int stop_cb(void *user, const mu_chat_event *ev) {
    (void)user;
    (void)ev;
    return 42;
}

static void test_parse_abort_and_done(void **state) {
    (void)state;
    mu_chat_parser *p;
    mu_err err = {0};
    assert_int_equal(mu_chat_parser_new(&p, &err), 0);
    const char *t = " to=user<|message|>hello";
    assert_int_equal(mu_chat_parser_feed(p, t, strlen(t), stop_cb, NULL, &err), 42);
    assert_false(mu_chat_parser_done(p));
    mu_chat_parser_free(p);
    collect c = {0};
    assert_int_equal(mu_chat_parser_new(&p, &err), 0);
    t = " to=user<|message|>x<|eot|>";
    assert_int_equal(mu_chat_parser_feed(p, t, strlen(t), on_event, &c, &err), 0);
    assert_true(mu_chat_parser_done(p));
    mu_chat_parser_free(p);
    mu_chat_parser_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_in_step),  cmocka_unit_test(test_render_builtin),
        cmocka_unit_test(test_render_errors),     cmocka_unit_test(test_parse_channels),
        cmocka_unit_test(test_parse_tools),       cmocka_unit_test(test_parse_abort_and_done),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
