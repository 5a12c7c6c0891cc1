#!/usr/bin/env bash
# ansible-test needs the checkout at ansible_collections/<namespace>/<name>; give it a copy of the
# files git would ship (tracked + untracked-not-ignored) so the user never moves the checkout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.build/ansible_collections/longhaul/trainnet"
rm -rf "$dest"
mkdir -p "$dest"
(cd "$root" && git ls-files -z --cached --others --exclude-standard) \
  | (cd "$root" && rsync -a --from0 --files-from=- ./ "$dest/")
cd "$dest"
# Empty ignore files are the contract: nothing is waived.
for f in tests/sanity/ignore-*.txt; do
  [[ -e "$f" ]] || continue
  if [[ -s "$f" ]]; then echo "sanity: $f is not empty" >&2; exit 1; fi
done
exec ansible-test sanity --python "$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
  --venv --color no "$@"
