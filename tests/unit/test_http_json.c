/* test_http_json.c: strict request validation (jcheck + every route schema),
 * server policy helpers (bind rule, key file, key compare, status mapping),
 * text helpers (UTF-8 boundary, repair). No model needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/http/api.h"
#include "../src/http/jcheck.h"
#include "../src/http/server.h"

/* Validates body text against a route's schema; returns 0 or the code and
 * leaves the message in err. */
static int check_route(const char *path, const char *body, mu_err *err) {
    json_t *j = NULL;
    int rc = mu_jc_parse(body, strlen(body), &j, err);
    if (rc) return rc;
    rc = mu_jc_check(j, api_schema(path), err);
    json_decref(j);
    return rc;
}

static void expect_ok(const char *path, const char *body) {
    mu_err err = {0};
    int rc = check_route(path, body, &err);
    if (rc) fprintf(stderr, "unexpected rejection of %s %s: %s\n", path, body, err.msg);
    assert_int_equal(rc, 0);
}

static void expect_bad(const char *path, const char *body, const char *needle) {
    mu_err err = {0};
    int rc = check_route(path, body, &err);
    assert_true(rc < 0);
    if (!strstr(err.msg, needle)) fprintf(stderr, "message '%s' lacks '%s'\n", err.msg, needle);
    assert_non_null(strstr(err.msg, needle));
}

static void test_parse(void **st) {
    (void)st;
    mu_err err;
    json_t *j = NULL;
    assert_int_equal(mu_jc_parse("{\"a\":1}", 7, &j, &err), 0);
    json_decref(j);
    assert_int_equal(mu_jc_parse("{\"a\":1,\"a\":2}", 13, &j, &err), MU_E_FORMAT);
    assert_int_equal(mu_jc_parse("[1]", 3, &j, &err), MU_E_FORMAT);
    assert_int_equal(mu_jc_parse("{\"a\":\"\xff\"}", 9, &j, &err), MU_E_FORMAT);
    assert_int_equal(mu_jc_parse("{\"a\":\"\\u0000\"}", 14, &j, &err), MU_E_FORMAT);
    assert_int_equal(mu_jc_parse("{\"a\":\"\\ud800\"}", 14, &j, &err), MU_E_FORMAT);
    assert_int_equal(mu_jc_parse("", 0, &j, &err), MU_E_FORMAT);
    assert_int_equal(mu_jc_parse("{} x", 4, &j, &err), MU_E_FORMAT);
}

static void test_openai_chat(void **st) {
    (void)st;
    const char *p = "/v1/chat/completions";
    expect_ok(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    expect_ok(p, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]},"
                 "{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                 "\"max_tokens\":5,\"temperature\":0,\"top_p\":0.9,\"top_k\":3,\"min_p\":0.1,\"seed\":42,"
                 "\"stop\":[\"a\",\"b\"],\"n\":1,\"logprobs\":true,\"top_logprobs\":5,"
                 "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],"
                 "\"tool_choice\":\"auto\",\"response_format\":{\"type\":\"text\"},\"frequency_penalty\":0}");
    expect_ok(p, "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":"
                 "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\","
                 "\"tool_call_id\":\"c\",\"content\":\"1\"}]}");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"contnt\":\"hi\"}]}", "unknown field 'messages[0].contnt'");
    expect_bad(p, "{\"mesages\":[]}", "unknown field 'mesages'");
    expect_bad(p, "{}", "'messages': is required");
    expect_bad(p, "{\"messages\":[]}", "must not be empty");
    expect_bad(p, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "must be one of");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":2.5}", "out of range");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1.5}", "integer");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":\"5\"}", "must be integer");
    expect_ok(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":16}");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":17}", "between 1 and 16");
    /* the sampler chain: OpenAI's penalties and logit_bias, llama.cpp's extensions */
    expect_ok(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"presence_penalty\":1,"
                 "\"frequency_penalty\":-0.5,\"logit_bias\":{\"50\":-100,\"7\":false,\"hi\":2},\"repeat_penalty\":1.1,"
                 "\"typical_p\":0.9,\"dry_multiplier\":0.8,\"dry_sequence_breakers\":[\"\\n\"],\"mirostat\":2,"
                 "\"xtc_probability\":0.5,\"top_n_sigma\":1,\"dynatemp_range\":0.5,\"min_keep\":1,\"repeat_last_n\":-1}");
    expect_ok(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":[[5,-1],[\"hi\",false]]}");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":[[5,1,2]]}", "logit_bias[0]");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":5}", "logit_bias");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"mirostat\":3}", "mirostat");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"repeat_last_n\":-2}", "repeat_last_n");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"dry_sequence_breakers\":[]}",
               "dry_sequence_breakers");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"xtc_probability\":2}", "out of range");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream_options\":{\"include_usag\":true}}",
               "stream_options.include_usag");
    expect_ok(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}");
    expect_ok(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
                 "\"json_schema\":{\"name\":\"n\",\"strict\":true,\"schema\":{\"type\":\"object\"}}}}");
    /* llama.cpp's forms: json_schema without a name, json_object with a schema */
    expect_ok(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
                 "\"json_schema\":{\"schema\":{}}}}");
    expect_ok(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\","
                 "\"schema\":{\"const\":\"42\"}}}");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\","
                  "\"schema\":123}}",
               "response_format.schema");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
                  "\"json_schema\":{\"name\":\"\"}}}",
               "response_format.json_schema.name");
    expect_ok(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":null,\"verbose\":true,"
                 "\"add_generation_prompt\":false,\"continue_final_message\":false}");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"verbose\":1}", "verbose");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"yaml\"}}",
               "response_format.type");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
               "messages[0].content[0].image_url.url");
    /* image parts pass the schema; their URLs are read by api_media.c */
    expect_ok(p, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"},"
                 "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,aGk=\",\"detail\":\"low\"}}]}]}");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]}",
               "messages[0].content[0].type");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\",\"detail\":\"max\"}}]}]}",
               "image_url.detail");
    expect_bad(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
                  "\"function\":{\"name\":\"f\",\"parameters\":{},\"extra\":1}}]}",
               "tools[0].function.extra");
    /* stop: up to MU_GEN_MAX_STOPS (editor clients send a dozen; OpenAI's own limit is 4) */
    char body[1024] = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[";
    for (int i = 0; i <= MU_GEN_MAX_STOPS; i++) strcat(body, i ? ",\"s\"" : "\"s\"");
    strcat(body, "]}");
    expect_bad(p, body, "too many items");
    strcpy(strrchr(body, ','), "]}"); /* one fewer: MU_GEN_MAX_STOPS */
    expect_ok(p, body);
}

static void test_other_routes(void **st) {
    (void)st;
    expect_ok("/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":3,\"logprobs\":2,\"echo\":true}");
    expect_ok("/v1/completions", "{\"prompt\":[1,2,3]}");
    expect_bad("/v1/completions", "{\"prompt\":[1,-2]}", "prompt[1]");
    /* llama.cpp's JSON prompt: text and base64 images */
    expect_ok("/completion", "{\"prompt\":{\"prompt_string\":\"a\"}}");
    expect_ok("/completion", "{\"prompt\":[[1,2],{\"prompt_string\":\"a\",\"multimodal_data\":[]}],\"model\":null}");
    expect_ok("/completion", "{\"prompt\":{\"prompt_string\":\"a\",\"multimodal_data\":[\"iVBO\"]}}");
    expect_bad("/completion", "{\"prompt\":{\"prompt_string\":\"a\",\"multimodal_data\":[1]}}",
               "prompt.multimodal_data[0]");
    expect_bad("/completion", "{\"prompt\":{\"text\":\"a\"}}", "prompt.text");
    expect_bad("/v1/completions", "{\"prompt\":\"a\",\"suffix\":\"b\"}", "suffix");
    expect_ok("/completion", "{\"prompt\":\"a\",\"n_predict\":-1,\"n_probs\":3,\"stream\":false,\"cache_prompt\":true,"
                             "\"repeat_penalty\":1.0,\"stop\":[\"x\"]}");
    expect_bad("/completion", "{\"prompt\":\"a\",\"n_predict\":-2}", "out of range");
    expect_ok("/completion", "{\"prompt\":\"a\",\"repeat_penalty\":1.1,\"repeat_last_n\":16,\"dry_multiplier\":0.8,"
                             "\"dry_base\":1.75,\"dry_allowed_length\":2,\"dry_penalty_last_n\":-1,"
                             "\"dry_sequence_breakers\":[\"\\n\",\":\"],\"xtc_threshold\":0.1,\"mirostat_tau\":5,"
                             "\"mirostat_eta\":0.1,\"dynatemp_exponent\":1,\"logit_bias\":[[15,-1.5]]}");
    expect_bad("/completion", "{\"prompt\":\"a\",\"repeat_penalty\":-1}", "repeat_penalty");
    expect_bad("/completion", "{\"prompt\":\"a\",\"dry_allowed_length\":-1}", "dry_allowed_length");
    expect_bad("/completion", "{\"prompt\":\"a\",\"typical_p\":null}", "typical_p");
    expect_bad("/completion", "{\"promt\":\"a\"}", "unknown field 'promt'");
    expect_ok("/tokenize", "{\"content\":\"a\",\"add_special\":true,\"with_pieces\":true}");
    expect_bad("/tokenize", "{\"content\":5}", "must be string");
    expect_ok("/detokenize", "{\"tokens\":[1,2]}");
    expect_bad("/detokenize", "{\"tokens\":[\"a\"]}", "tokens[0]");
    expect_ok("/apply-template", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    expect_ok("/api/generate", "{\"model\":\"m\",\"prompt\":\"hi\",\"stream\":false,\"options\":{\"temperature\":0,"
                               "\"num_predict\":3,\"stop\":[\"x\"]},\"keep_alive\":\"5m\"}");
    expect_bad("/api/generate", "{\"prompt\":\"hi\",\"options\":{\"temprature\":0}}", "options.temprature");
    expect_ok("/api/generate", "{\"prompt\":\"hi\",\"options\":{\"repeat_penalty\":1.1,\"repeat_last_n\":-1,"
                               "\"presence_penalty\":0.5,\"frequency_penalty\":0.5,\"typical_p\":0.7,\"mirostat\":1,"
                               "\"mirostat_tau\":5,\"mirostat_eta\":0.1,\"min_p\":0.05}}");
    expect_bad("/api/generate", "{\"prompt\":\"hi\",\"options\":{\"mirostat\":5}}", "options.mirostat");
    expect_ok("/api/generate", "{\"prompt\":\"hi\",\"format\":\"json\"}");
    expect_ok("/api/generate", "{\"prompt\":\"hi\",\"format\":{\"type\":\"object\"}}");
    expect_bad("/api/generate", "{\"prompt\":\"hi\",\"format\":\"yaml\"}", "'json'");
    expect_ok("/completion", "{\"prompt\":\"a\",\"json_schema\":{\"type\":\"array\"}}");
    expect_bad("/completion", "{\"prompt\":\"a\",\"json_schema\":[]}", "json_schema");
    expect_ok("/api/generate", "{\"prompt\":\"hi\",\"images\":[\"aGk=\"]}");
    expect_bad("/api/generate", "{\"prompt\":\"hi\",\"images\":[{}]}", "images[0]");
    expect_ok("/api/chat", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"images\":[]}],\"stream\":false}");
    expect_bad("/api/chat", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"image\":[]}]}", "messages[0].image");
    expect_ok("/api/show", "{\"model\":\"m\"}");
    expect_bad("/api/show", "{\"modle\":\"m\"}", "modle");
    assert_null(api_schema("/health"));
}

/* The routes and fields of issue 17: embeddings, Anthropic Messages, OpenAI
 * Responses, llama.cpp extensions, batch prompts; names nobody defines are
 * still refused with their path. */
static void test_compat_routes(void **st) {
    (void)st;
    expect_ok("/v1/embeddings", "{\"input\":\"a\"}");
    expect_ok("/v1/embeddings", "{\"input\":[\"a\",[1,2]],\"encoding_format\":\"base64\",\"embd_normalize\":2}");
    expect_ok("/embedding", "{\"content\":[1,2,3]}");
    expect_ok("/api/embed", "{\"model\":\"m\",\"input\":[\"a\"],\"truncate\":false,\"keep_alive\":\"5m\"}");
    expect_ok("/api/embeddings", "{\"prompt\":\"a\"}");
    expect_bad("/api/embeddings", "{}", "'prompt': is required");
    expect_bad("/v1/embeddings", "{\"input\":\"a\",\"encoding_format\":\"hex\"}", "must be one of");
    expect_ok("/v1/embeddings", "{\"input\":[[1,\"x\"],[2]]}");
    expect_bad("/v1/embeddings", "{\"input\":[[1,{}]]}", "input[0][1]");
    expect_bad("/v1/embeddings", "{\"input\":\"a\",\"pooling\":\"mean\"}", "unknown field 'pooling'");
    const char *m = "/v1/messages";
    expect_ok(m, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    expect_ok(m, "{\"model\":\"claude\",\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":\"s\"}],"
                 "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\","
                 "\"cache_control\":{\"type\":\"ephemeral\"}}]}],\"stop_sequences\":[\"x\"],\"top_k\":5,"
                 "\"metadata\":{\"user_id\":\"u\"},\"tool_choice\":{\"type\":\"auto\"},\"thinking\":{\"type\":\"disabled\"}}");
    expect_bad(m, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "'max_tokens': is required");
    expect_bad(m, "{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"hi\"}]}", "must be one of");
    expect_bad(m, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"video\"}]}]}",
               "messages[0].content[0].type");
    expect_bad(m, "{\"max_tokens\":5,\"temperature\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
               "temperature");
    expect_bad(m, "{\"max_tokens\":5,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"w\",\"input_schema\":{}}],"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "server tools");
    expect_ok("/v1/messages/count_tokens", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    const char *rp = "/v1/responses";
    expect_ok(rp, "{\"input\":\"hi\"}");
    expect_ok(rp, "{\"input\":[{\"role\":\"user\",\"content\":\"hi\"},{\"type\":\"function_call_output\","
                  "\"call_id\":\"c\",\"output\":\"1\"}],\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],"
                  "\"tool_choice\":\"required\",\"text\":{\"format\":{\"type\":\"json_object\"}},\"reasoning\":"
                  "{\"effort\":\"minimal\"},\"store\":true,\"metadata\":{},\"include\":[\"x\"],\"truncation\":\"auto\"}");
    expect_bad(rp, "{}", "'input': is required");
    expect_bad(rp, "{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\",\"name\":\"w\"}]}", "function tools");
    expect_bad(rp, "{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "input[0].type");
    /* llama.cpp's extensions and OpenAI's accepted fields */
    expect_ok("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"store\":true,"
                                      "\"metadata\":{\"a\":\"b\"},\"service_tier\":\"flex\",\"n_predict\":-1,"
                                      "\"cache_prompt\":true,\"id_slot\":3,\"chat_template_kwargs\":{},"
                                      "\"timings_per_token\":true,\"return_progress\":true,\"post_sampling_probs\":false,"
                                      "\"json_schema\":{},\"grammar\":\"\",\"tool_choice\":{\"type\":\"function\","
                                      "\"function\":{\"name\":\"f\"}}}");
    expect_bad("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"grammar\":5}", "grammar");
    expect_bad("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"id_slot\":4}", "id_slot");
    expect_bad("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"service_tier\":\"x\"}",
               "service_tier");
    expect_ok("/completion", "{\"prompt\":[\"a\",[1,2]],\"response_fields\":[\"content\"],\"cache_prompt\":true}");
    expect_ok("/v1/completions", "{\"prompt\":[[1],[2,3]],\"store\":false}");
    expect_ok("/completion", "{\"prompt\":[[\"a\",1]]}");
    expect_bad("/completion", "{\"prompt\":[[[1]]]}", "prompt[0][0]");
}

static void test_depth(void **st) {
    (void)st;
    /* free-form objects (tool parameters) are depth-limited too */
    char buf[4096];
    char *p = buf;
    p += sprintf(p, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
                    "\"function\":{\"name\":\"f\",\"parameters\":");
    for (int i = 0; i < 100; i++) p += sprintf(p, "{\"a\":");
    p += sprintf(p, "1");
    for (int i = 0; i < 100; i++) p += sprintf(p, "}");
    sprintf(p, "}}]}");
    expect_bad("/v1/chat/completions", buf, "nested too deeply");
}

static void test_policy(void **st) {
    (void)st;
    mu_err err;
    bool lo = false;
    assert_int_equal(mu_http_bind_check("127.0.0.1", false, false, &lo, &err), 0);
    assert_true(lo);
    assert_int_equal(mu_http_bind_check("127.0.0.2", false, false, &lo, &err), 0);
    assert_int_equal(mu_http_bind_check("::1", false, false, &lo, &err), 0);
    assert_int_equal(mu_http_bind_check("0.0.0.0", false, false, &lo, &err), MU_E_ARG);
    assert_false(lo);
    assert_int_equal(mu_http_bind_check("0.0.0.0", true, false, &lo, &err), MU_E_ARG);
    assert_int_equal(mu_http_bind_check("0.0.0.0", false, true, &lo, &err), MU_E_ARG);
    assert_int_equal(mu_http_bind_check("0.0.0.0", true, true, &lo, &err), 0);
    assert_int_equal(mu_http_bind_check("::", false, false, &lo, &err), MU_E_ARG);
    /* a list (llama-server's "127.0.0.1,::1"): each address checked */
    assert_int_equal(mu_http_bind_check("127.0.0.1,::1", false, false, &lo, &err), 0);
    assert_true(lo);
    assert_int_equal(mu_http_bind_check("127.0.0.1,0.0.0.0", false, false, &lo, &err), MU_E_ARG);
    assert_false(lo);
    assert_int_equal(mu_http_bind_check("127.0.0.1,0.0.0.0", true, true, &lo, &err), 0);
    assert_false(lo);
    assert_int_equal(mu_http_bind_check("127.0.0.1,,::1", false, false, &lo, &err), MU_E_ARG);
    assert_int_equal(mu_http_bind_check("127.0.0.1,", false, false, &lo, &err), MU_E_ARG);
    assert_int_equal(mu_http_bind_check("127.0.0.1,::1,127.0.0.2,127.0.0.3,127.0.0.4", false, false, &lo, &err),
                     MU_E_ARG);

    assert_true(mu_http_key_equal("secret", 6, "secret"));
    assert_false(mu_http_key_equal("secreT", 6, "secret"));
    assert_false(mu_http_key_equal("secret2", 7, "secret"));
    assert_false(mu_http_key_equal("", 0, "secret"));

    char path[] = "/tmp/mu_key_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "k3y-value\n", 10), 10);
    close(fd);
    char key[64];
    chmod(path, 0644);
    assert_int_equal(mu_http_read_key_file(path, key, sizeof key, &err), MU_E_ARG);
    assert_non_null(strstr(err.msg, "0600"));
    chmod(path, 0600);
    assert_int_equal(mu_http_read_key_file(path, key, sizeof key, &err), 0);
    assert_string_equal(key, "k3y-value");
    unlink(path);
    assert_int_equal(mu_http_read_key_file(path, key, sizeof key, &err), MU_E_IO);

    assert_int_equal(mu_http_status_of(MU_E_ARG), 400);
    assert_int_equal(mu_http_status_of(MU_E_STATE), 429);
    assert_int_equal(mu_http_status_of(MU_E_IO), 500);
}

static void test_text_helpers(void **st) {
    (void)st;
    assert_int_equal(api_utf8_complete("ab", 2), 2);
    assert_int_equal(api_utf8_complete("a\xc3", 2), 1);
    assert_int_equal(api_utf8_complete("a\xc3\xa9", 3), 3);
    assert_int_equal(api_utf8_complete("\xe2\x82", 2), 0);
    assert_int_equal(api_utf8_complete("\xf0\x9f\x98\x80", 4), 4);
    json_t *s = api_json_text("a\xff" "b", 3);
    assert_string_equal(json_string_value(s), "a\xEF\xBF\xBD" "b");
    json_decref(s);

}

/* The fields this compat work accepts, refuses saying why, and the
 * deprecated functions API's messages as the template sees them. */
static void test_defined_fields(void **st) {
    (void)st;
    const char *C = "/v1/chat/completions";
    expect_ok(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prediction\":{\"type\":\"content\",\"content\":\"y\"},"
                 "\"verbosity\":\"low\",\"prompt_cache_key\":\"k\",\"modalities\":[\"text\"],\"audio\":null,"
                 "\"functions\":[{\"name\":\"f\"}],\"function_call\":{\"name\":\"f\"}}");
    expect_ok(C, "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"refusal\":null,\"annotations\":[],"
                 "\"function_call\":{\"name\":\"f\",\"arguments\":\"{}\"}},{\"role\":\"function\",\"name\":\"f\",\"content\":\"1\"}]}");
    expect_bad(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"web_search_options\":{}}",
               "must be null (web search is not supported)");
    expect_bad(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"modalities\":[\"audio\"]}", "text output only");
    expect_bad("/v1/responses", "{\"input\":\"x\",\"conversation\":\"c\"}", "not stored");
    expect_bad("/v1/messages", "{\"max_tokens\":1,\"messages\":[],\"mcp_servers\":[]}", "MCP servers are not supported");
    expect_ok("/api/generate", "{\"prompt\":\"x\",\"context\":[1,2,3]}"); /* Ollama's deprecated context */
    expect_bad("/api/generate", "{\"prompt\":\"x\",\"context\":[\"a\"]}", "context");
    expect_bad("/api/generate", "{\"prompt\":\"x\",\"context\":[-1]}", "context");
    expect_ok("/completion", "{\"prompt\":\"x\",\"grammar\":\"root ::= \\\"a\\\"\",\"grammar_lazy\":true,"
                             "\"grammar_triggers\":[{\"type\":2,\"value\":\"(a)\"}],\"preserved_tokens\":[\"<x>\"]}");
    expect_ok("/api/chat", "{\"messages\":[],\"think\":\"high\",\"options\":{\"num_thread\":2,\"use_mmap\":true}}");
    expect_bad("/api/chat", "{\"messages\":[],\"think\":\"max\"}", "think");
    json_t *m = json_loads("[{\"role\":\"assistant\",\"content\":null,\"function_call\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}},"
                           "{\"role\":\"function\",\"name\":\"f\",\"content\":\"1\"}]",
                           0, NULL);
    assert_non_null(m);
    json_t *n = api_normalize_messages(m);
    const json_t *call = json_array_get(json_object_get(json_array_get(n, 0), "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(call, "function"), "name")), "f");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(json_object_get(call, "function"), "arguments"), "a")), 1);
    assert_null(json_object_get(json_array_get(n, 0), "function_call"));
    assert_string_equal(json_string_value(json_object_get(json_array_get(n, 1), "role")), "tool");
    json_decref(n);
    json_decref(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defined_fields),
        cmocka_unit_test(test_parse),        cmocka_unit_test(test_openai_chat), cmocka_unit_test(test_other_routes),
        cmocka_unit_test(test_compat_routes),
        cmocka_unit_test(test_depth),        cmocka_unit_test(test_policy),      cmocka_unit_test(test_text_helpers),
    };
    return cmocka_run_group_tests_name("http_json", tests, NULL, NULL);
}
