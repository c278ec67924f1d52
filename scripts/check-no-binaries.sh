#!/usr/bin/env bash
# check-no-binaries.sh fails when a file tracked by git is an executable
# binary (ELF, Mach-O or PE): build outputs belong in bin/ or nowhere, never
# in the repository.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
found=0
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue
  magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
  case "$magic" in
    7f454c46 | cffaedfe | cefaedfe | feedfacf | feedface | 4d5a*)
      echo "tracked executable binary: $f (remove it with 'git rm --cached' and ignore it)" >&2
      found=1 ;;
  esac
done < <(git ls-files -z)
exit "$found"
