/* chat_format.c: prompt rendering for chat requests.
 * Owns: the built-in Muse chat template (compiled in, identical to
 * tests/jinja/templates/muse.jinja; a unit test keeps them in step), the
 * context the template sees (messages, tools, add_generation_prompt,
 * bos_token, eos_token, reasoning_strength/reasoning_effort) and the
 * normalisation of OpenAI-style tool-call arguments (JSON text -> object).
 * Does not: interpret templates (jinja_*.c) or parse model output (chat_parse.c).
 * Key choice: the Muse format is itself a Jinja template run by the same
 * interpreter, so the built-in format and a GGUF-embedded copy of it render
 * byte-identically, and the generator can embed mu_chat_muse_template(). */
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "jinja.h"

static const char MUSE_TEMPLATE[] =
    "{#- Muse Glimmer chat template (muser built-in; docs/chat-format.md).\n"
    "    Variables: messages, tools, add_generation_prompt, bos_token,\n"
    "    reasoning_strength (low|medium|high|xhigh, default high; reasoning_effort\n"
    "    is accepted as an alias). -#}\n"
    "{%- set rs = reasoning_strength if reasoning_strength is defined and reasoning_strength else (reasoning_effort if reasoning_effort is defined and reasoning_effort else 'high') -%}\n"
    "{%- if rs not in ['low', 'medium', 'high', 'xhigh'] -%}\n"
    "    {{- raise_exception('reasoning strength must be low, medium, high or xhigh, not ' ~ rs) -}}\n"
    "{%- endif -%}\n"
    "{%- macro text(c) -%}\n"
    "    {%- if c is none or c is undefined -%}\n"
    "    {%- elif c is string -%}{{ c }}\n"
    "    {%- else -%}\n"
    "        {%- for part in c -%}\n"
    "            {%- if part.type == 'text' -%}{{ part.text }}{%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- endif -%}\n"
    "{%- endmacro -%}\n"
    "{%- macro atem(call) -%}\n"
    "    {%- set fn = call.function if call.function is defined else call -%}\n"
    "    <atem:function_calls><atem:invoke name=\"{{ fn.name }}\">\n"
    "    {%- if fn.arguments is mapping -%}\n"
    "        {%- for key, value in fn.arguments.items() -%}\n"
    "            <atem:parameter name=\"{{ key }}\">{% if value is string %}{{ value }}{% else %}{{ value | tojson }}{% endif %}</atem:parameter>\n"
    "        {%- endfor -%}\n"
    "    {%- elif fn.arguments is string -%}{{ fn.arguments }}\n"
    "    {%- endif -%}\n"
    "    </atem:invoke></atem:function_calls>\n"
    "{%- endmacro -%}\n"
    "{{- bos_token if bos_token is defined else '<|begin_of_text|>' -}}\n"
    "{%- if messages and messages[0].role == 'system' -%}\n"
    "    {%- set system = text(messages[0].content) -%}\n"
    "    {%- set rest = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set system = 'You are Muse, a helpful assistant.' -%}\n"
    "    {%- set rest = messages -%}\n"
    "{%- endif -%}\n"
    "<|start|>system<|message|>{{ system }}\n"
    "\n"
    "Reasoning strength: {{ rs }}.\n"
    "{%- if tools -%}\n"
    "    {{- '\\n\\n# Tools\\n\\nYou can call these functions (each described as JSON Schema):\\n' -}}\n"
    "    {%- for tool in tools -%}\n"
    "        {{- (tool.function if tool.function is defined else tool) | tojson -}}{{- '\\n' -}}\n"
    "    {%- endfor -%}\n"
    "    {{- 'To call a function, write a message to it (to=NAME) holding:\\n' -}}\n"
    "    {{- '<atem:function_calls><atem:invoke name=\"NAME\"><atem:parameter name=\"PARAM\">VALUE</atem:parameter></atem:invoke></atem:function_calls>\\n' -}}\n"
    "    {{- 'Write strings and numbers bare and objects and lists as JSON.' -}}\n"
    "{%- endif -%}\n"
    "{{- '<|eom|>' if rest and rest[0].role == 'system' else '<|eot|>' -}}\n"
    "{#- Reasoning of earlier turns is dropped: only assistant messages after the\n"
    "    last user message keep their reasoning_content. -#}\n"
    "{%- set ns = namespace(last_user=-1) -%}\n"
    "{%- for m in rest -%}\n"
    "    {%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- for m in rest -%}\n"
    "    {%- set next_role = rest[loop.index0 + 1].role if not loop.last else '' -%}\n"
    "    {%- if m.role == 'assistant' -%}\n"
    "        {%- set acc = namespace(parts=[]) -%}\n"
    "        {%- if loop.index0 > ns.last_user and m.reasoning_content is defined and m.reasoning_content -%}\n"
    "            {%- set acc.parts = acc.parts + [['self', m.reasoning_content]] -%}\n"
    "        {%- endif -%}\n"
    "        {%- if m.content is defined and text(m.content) -%}\n"
    "            {%- set acc.parts = acc.parts + [['user', text(m.content)]] -%}\n"
    "        {%- endif -%}\n"
    "        {%- if m.tool_calls is defined and m.tool_calls -%}\n"
    "            {%- for call in m.tool_calls -%}\n"
    "                {%- set acc.parts = acc.parts + [[(call.function.name if call.function is defined else call.name), atem(call)]] -%}\n"
    "            {%- endfor -%}\n"
    "        {%- endif -%}\n"
    "        {%- set parts = acc.parts if acc.parts else [['user', '']] -%}\n"
    "        {%- for p in parts -%}\n"
    "            <|start|>assistant to={{ p[0] }}<|message|>{{ p[1] }}\n"
    "            {{- '<|eom|>' if not loop.last or next_role == 'assistant' else '<|eot|>' -}}\n"
    "        {%- endfor -%}\n"
    "    {%- elif m.role in ['system', 'user', 'tool'] -%}\n"
    "        <|start|>{{ m.role }}<|message|>{{ text(m.content) }}\n"
    "        {{- '<|eom|>' if next_role == m.role else '<|eot|>' -}}\n"
    "    {%- else -%}\n"
    "        {{- raise_exception('unknown role ' ~ m.role) -}}\n"
    "    {%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}\n";

const char *mu_chat_muse_template(void) { return MUSE_TEMPLATE; }

/* Deep copy of messages where tool_calls[].function.arguments given as JSON
 * text that parses to an object become that object. */
static json_t *normalise_messages(const json_t *messages) {
    json_t *copy = json_deep_copy(messages);
    if (!copy) return NULL;
    size_t i;
    json_t *m;
    json_array_foreach(copy, i, m) {
        json_t *calls = json_object_get(m, "tool_calls");
        if (!json_is_array(calls)) continue;
        size_t j;
        json_t *c;
        json_array_foreach(calls, j, c) {
            json_t *fn = json_object_get(c, "function");
            json_t *holder = json_is_object(fn) ? fn : c;
            json_t *args = json_object_get(holder, "arguments");
            if (!json_is_string(args)) continue;
            json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
            if (json_is_object(parsed)) json_object_set_new(holder, "arguments", parsed);
            else json_decref(parsed);
        }
    }
    return copy;
}

int mu_chat_render(const char *tmpl, const json_t *messages, const json_t *tools, const char *strength,
                   bool add_gen, const char *bos, const char *eos, char **out, mu_err *err) {
    if (!json_is_array(messages)) return mu_fail(err, MU_E_ARG, "chat: messages is not a JSON array");
    if (tools && !json_is_array(tools) && !json_is_null(tools))
        return mu_fail(err, MU_E_ARG, "chat: tools is not a JSON array");
    if (strength && strcmp(strength, "low") && strcmp(strength, "medium") && strcmp(strength, "high") &&
        strcmp(strength, "xhigh"))
        return mu_fail(err, MU_E_ARG, "chat: reasoning strength must be low, medium, high or xhigh: %.40s", strength);
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
            return mu_fail(err, MU_E_ARG, "chat: message %zu has no string role", i);
    }
    json_t *msgs = normalise_messages(messages);
    json_t *ctx = json_object();
    if (!msgs || !ctx) {
        json_decref(msgs);
        json_decref(ctx);
        return mu_fail(err, MU_E_NOMEM, "chat: out of memory");
    }
    json_object_set_new(ctx, "messages", msgs);
    if (tools && json_is_array(tools) && json_array_size(tools) > 0) json_object_set(ctx, "tools", (json_t *)tools);
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_gen));
    json_object_set_new(ctx, "bos_token", json_string(bos ? bos : "<|begin_of_text|>"));
    json_object_set_new(ctx, "eos_token", json_string(eos ? eos : "<|end_of_text|>"));
    if (strength) {
        json_object_set_new(ctx, "reasoning_strength", json_string(strength));
        json_object_set_new(ctx, "reasoning_effort", json_string(strength));
    }
    const char *t = (tmpl && *tmpl) ? tmpl : MUSE_TEMPLATE;
    size_t len = 0;
    int rc = mu_jinja_render(t, strlen(t), ctx, out, &len, err);
    json_decref(ctx);
    return rc;
}
