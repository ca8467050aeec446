#!/usr/bin/env bash
# Checks that every repository path the tracked markdown files name exists, so that the docs cannot
# point at files that were moved or removed. A path counts when it starts with a top-level entry of the
# repository (src/..., tests/..., docs/..., Makefile) or is a relative markdown link; a program may be
# named by its source without the extension (dev/cuda/bench_gemm, build/tests/test_drafter for
# tests/test_drafter.c); globs (tests/test_cuda_*.c) must match something; paths that git ignores
# (build outputs, fetched caches) are skipped.
# Usage: bash scripts/check_doc_paths.sh   (from anywhere; exit 1 naming FILE:LINE: PATH for each missing)
set -uo pipefail
cd "$(dirname "$0")/.."
top=$(git ls-files | cut -d/ -f1 | sort -u | sed 's/[.]/\\./g' | paste -sd'|')
missing=0

# exists PATH: the path, the source of a program, or a glob's match
exists() {
    local p=${1%/}
    [ -e "$p" ] && return 0
    local ext
    for ext in c cu sh py; do [ -e "$p.$ext" ] && return 0; done
    case $p in *'*'*) compgen -G "$p" > /dev/null && return 0 ;; esac
    return 1
}

# check FILE LINE PATH: PATH as written in FILE (relative to the root, or to FILE's folder for links)
check() {
    local file=$1 line=$2 p=$3
    p=${p%%#*}
    [ -n "$p" ] || return 0
    case $p in build/*) p=${p#build/} ;; esac
    git check-ignore -q "$p" 2>/dev/null && return 0
    exists "$p" && return 0
    echo "$file:$line: $3"
    missing=$((missing + 1))
}

while IFS= read -r md; do
    dir=$(dirname "$md")
    # paths that start with a top-level entry, not inside a longer path or a URL
    while IFS=: read -r line p; do
        check "$md" "$line" "${p%[.,;:]}"
    done < <(grep -noP "(?<![\w./~\$-])(build/)?($top)(/[\w.*+-]+)*/?" "$md" | grep -v ':$')
    # relative markdown links: [text](path)
    while IFS=: read -r line target; do
        case $target in http:*|https:*|mailto:*|'#'*) continue ;; esac
        rel=$(realpath -m --relative-to=. "$dir/${target%%#*}")
        check "$md" "$line" "$rel"
    done < <(grep -noP '\]\(\K[^)\s]+(?=\))' "$md")
done < <(git ls-files '*.md')

if [ "$missing" -gt 0 ]; then
    echo "check_doc_paths: $missing path(s) named in markdown do not exist" >&2
    exit 1
fi
echo "check_doc_paths: every path named in markdown exists"
