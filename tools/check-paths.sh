#!/usr/bin/env bash
# Fails when a comment or a doc cites a repository path that does not exist.
#   Scanned: the comments of the source files under src, include, cmd, tests,
#   tools and bench (C-like files and node scripts: /* */ and //; shell
#   scripts and the Makefile: #; Python: # and triple-quoted strings), and
#   the whole text of the Markdown docs (README.md, HACKING.md, docs/*.md,
#   tests/**/README.md).
#   A cited path is a word that starts with src/, include/, cmd/, tests/,
#   tools/, bench/, docs/ or models/ right after a space, a quote, a
#   backtick or a bracket (so build/tests/x, $BUILD/tests/x, ../shared/x and
#   URLs are not citations), or the target of a relative Markdown link
#   (resolved against the doc's directory; links that leave the repository,
#   like ../shared, are not checked). Trailing punctuation is dropped.
#   Globs count as one: `tests/unit/test_*.c`, `<name>` placeholders and
#   {a,b} alternatives must match at least one path.
#   A path exists when git tracks it, or it is a new file git would add
#   (ignored build outputs do not count); outside a git checkout, when it is
#   on disk. Directories count, with or without a trailing slash.
#   A line that contains "check-paths: ignore" is skipped (for a deliberate
#   mention of a path that no longer or not yet exists).
# Output: one line per dangling path, FILE:LINE: PATH; exit 1 if any.
# Needs bash 4, grep, sed and git (or find).
set -u
cd "$(dirname "$0")/.."

ROOTS='src|include|cmd|tests|tools|bench|docs|models'
# a root, then path characters, <placeholders> and {a,b} alternatives
TOKEN="(${ROOTS})/([A-Za-z0-9_.*?+/-]|<[A-Za-z0-9_-]+>|\\{[A-Za-z0-9_.,*/-]*\\})*"
BEFORE='(^|[][[:space:]"'"'"'`(<>|=,;:*])'

# ---- the repository's paths: files and every directory above them
declare -A have
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  list() { git ls-files --cached --others --exclude-standard; }
else
  list() { find . -path ./build -prune -o -path ./.git -prune -o -type f -print | sed 's|^\./||'; }
fi
all=()
while IFS= read -r f; do
  [ -e "$f" ] || continue # deleted in the work tree, not yet in the index
  have[$f]=1
  all+=("$f")
  d=$f
  while [[ $d == */* ]]; do
    d=${d%/*}
    [ -n "${have[$d]:-}" ] && break
    have[$d]=1
    all+=("$d")
  done
done < <(list)

# exists PATH: 0 when PATH (a file, a directory, or a glob) names something
exists() {
  local p=${1%/} q
  [ -z "$p" ] && return 0
  if [[ $p != *[][*?]* ]]; then
    [ -n "${have[$p]:-}" ]
    return
  fi
  for q in "${all[@]}"; do
    # shellcheck disable=SC2053 # a glob on purpose
    [[ $q == $p ]] && return 0
  done
  return 1
}

# normalize PATH: a/./b -> a/b, a/x/../b -> a/b; prints nothing when the
# path leaves the repository
normalize() {
  local - IFS=/ part out=()
  set -f # no globbing of the parts
  for part in $1; do
    case $part in
      '' | .) ;;
      ..) [ ${#out[@]} -eq 0 ] && return; unset 'out[${#out[@]}-1]' ;;
      *) out+=("$part") ;;
    esac
  done
  echo "${out[*]}"
}

# as_glob TOKEN: <name> and {a,b} become *
as_glob() { sed -E 's/<[A-Za-z0-9_-]+>/*/g; s/\{[^}]*\}/*/g' <<<"$1"; }

# trim TOKEN: drop trailing punctuation that ends a sentence
trim() {
  local t=$1
  while [[ $t == *[.,:\;-] ]]; do t=${t%?}; done
  echo "$t"
}

bad=0
report() { echo "$1:$2: $3"; bad=$((bad + 1)); }

# check_tokens FILE: reads "LINE:TEXT" lines (text already limited to what is
# scanned) and checks the root-anchored paths in them
check_tokens() {
  local file=$1 ln text tok p
  while IFS= read -r entry; do
    ln=${entry%%:*}
    text=${entry#*:}
    [[ $text == *"check-paths: ignore"* ]] && continue
    while IFS= read -r tok; do
      [ -z "$tok" ] && continue
      tok=$(trim "$(sed -E "s/^[^A-Za-z]//" <<<"$tok")")
      p=$(as_glob "$tok")
      exists "$p" || report "$file" "$ln" "$tok"
    done < <(grep -oE "${BEFORE}${TOKEN}" <<<"$text")
  done
}

# comments_c FILE: "LINE:COMMENT TEXT" for every line with a comment
comments_c() {
  local n=0 inb=0 line out rest re_code='^([^"'"'"'/]|/[^*/"'"'"'])*'
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    out=''
    rest=$line
    while [ -n "$rest" ]; do
      if [ $inb = 1 ]; then
        if [[ $rest == *'*/'* ]]; then
          out+=" ${rest%%\*/*}"
          rest=${rest#*\*/}
          inb=0
        else
          out+=" $rest"
          rest=''
        fi
        continue
      fi
      [[ $rest == *[/\"\']* ]] || break
      [[ $rest =~ $re_code ]] && rest=${rest:${#BASH_REMATCH[0]}}
      case $rest in
        '//'*) out+=" ${rest:2}"; rest='' ;;
        '/*'*) inb=1; rest=${rest:2} ;;
        '"'*)
          [[ $rest =~ ^\"([^\"\\]|\\.)*\"? ]]
          rest=${rest:${#BASH_REMATCH[0]}} ;;
        "'"*)
          [[ $rest =~ ^\'([^\'\\]|\\.)*\'? ]]
          rest=${rest:${#BASH_REMATCH[0]}} ;;
        *) rest=${rest:1} ;;
      esac
    done
    [ -n "$out" ] && echo "$n:$out"
  done <"$1"
}

# comments_hash FILE: the text after a # that starts a comment (at the start
# of a line or after a space; not $#, ${#x} or "#")
comments_hash() {
  sed -E 's/(^|[[:space:]])#/\1\x01/' "$1" | grep -n $'\x01' | sed -E 's/^([0-9]+):[^\x01]*\x01/\1:/'
}

# comments_py FILE: # comments and the lines of triple-quoted strings
# (docstrings)
comments_py() {
  local n=0 ind=0 line k
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    if [ $ind = 1 ] || [[ $line == *'"""'* ]]; then
      echo "$n:$line"
      k=${line//'"""'/$'\x01'}
      k=${k//[!$'\x01']/}
      [ $((${#k} % 2)) = 1 ] && ind=$((1 - ind))
    elif [[ $line =~ (^|[[:space:]])#(.*) ]]; then
      echo "$n:${BASH_REMATCH[2]}"
    fi
  done <"$1"
}

# ---- source comments (only files that mention a root at all are parsed)
while IFS= read -r f; do
  grep -qE "$TOKEN" "$f" 2>/dev/null || continue
  case $f in
    *.c | *.h | *.cu | *.mjs | *.js) check_tokens "$f" < <(comments_c "$f" | grep -E "$TOKEN") ;;
    *.py) check_tokens "$f" < <(comments_py "$f" | grep -E "$TOKEN") ;;
    *.sh | Makefile) check_tokens "$f" < <(comments_hash "$f" | grep -E "$TOKEN") ;;
    *.*) ;;
    *) # scripts without an extension
      if head -n1 "$f" 2>/dev/null | grep -qE '^#!.*python3?$'; then
        check_tokens "$f" < <(comments_py "$f" | grep -E "$TOKEN")
      elif head -n1 "$f" 2>/dev/null | grep -qE '^#!.*(bash|sh)$'; then
        check_tokens "$f" < <(comments_hash "$f" | grep -E "$TOKEN")
      elif head -n1 "$f" 2>/dev/null | grep -qE '^#!.*node$'; then
        check_tokens "$f" < <(comments_c "$f" | grep -E "$TOKEN")
      fi ;;
  esac
done < <(printf '%s\n' "${all[@]}" | grep -E '^((src|include|cmd|tests|tools|bench)/|Makefile$)' | sort)

# ---- Markdown docs: every line, plus relative link targets
while IFS= read -r f; do
  check_tokens "$f" < <(grep -nE "${TOKEN}" "$f")
  dir=$(dirname "$f")
  while IFS= read -r entry; do
    ln=${entry%%:*}
    target=${entry#*:}
    target=${target#*(}
    target=${target%%#*}
    case $target in '' | *:*) continue ;; esac # anchors, URLs, mailto:
    [[ $(sed -n "${ln}p" "$f") == *"check-paths: ignore"* ]] && continue
    if [[ $target == /* ]]; then p=$(normalize "$target"); else p=$(normalize "$dir/$target"); fi
    [ -z "$p" ] && continue # outside the repository
    exists "$p" || report "$f" "$ln" "$target"
  done < <(grep -noE '\]\([^)[:space:]]+' "$f")
done < <(printf '%s\n' "${all[@]}" | grep -E '^(README\.md|HACKING\.md|docs/[^/]*\.md|tests/(.*/)?README\.md)$' | sort)

if [ $bad -gt 0 ]; then
  echo "check-paths: $bad cited path(s) do not exist"
  exit 1
fi
echo "check-paths: every cited path exists"
