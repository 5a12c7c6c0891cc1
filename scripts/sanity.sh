#!/usr/bin/env bash
# ansible-test needs the checkout at ansible_collections/<namespace>/<name>; give it a copy of the
# files git would ship (tracked + untracked-not-ignored) so the user never moves the checkout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.build/ansible_collections/longhaul/trainnet"

# ansible-test --venv bootstraps pip with a script from ci-files.testing.ansible.com, which is
# unreachable here; put the offline stand-in and the pip wheel (from PyPI) in its cache.
pip_version="$(python3 - <<'PY'
import os, re, ansible_test
src = open(os.path.join(os.path.dirname(ansible_test.__file__), "_internal", "python_requirements.py")).read()
print(re.search(r"pip='([0-9.]+)'", src).group(1))
PY
)"
cache="$HOME/.ansible/test/cache"
if [[ ! -f "$cache/get_pip_${pip_version//./_}.py" ]] || ! ls "$cache"/pip-"$pip_version"-py3-none-any.whl >/dev/null 2>&1; then
  mkdir -p "$cache"
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "$cache" "pip==$pip_version" >/dev/null 2>&1
  cp "$root/scripts/ansible-test-get-pip.py" "$cache/get_pip_${pip_version//./_}.py"
fi

rm -rf "$dest"
mkdir -p "$dest"
# Only what the collection ships plus its unit tests: the lab, benchmarks and dev scripts are
# controller-side tools outside build_ignore's content (they have their own tests).
(cd "$root" && git ls-files -z --cached --others --exclude-standard -- . \
   ':!:lab/' ':!:benchmarks/' ':!:scripts/' ':!:tests/lab/' ':!:tests/benchmarks/' ':!:.ci/') \
  | (cd "$root" && rsync -a --from0 --files-from=- ./ "$dest/")
cd "$dest"
# A repository of its own: ansible-test lists targets with git, and the checkout's git would
# see .build as ignored and offer no targets at all.
git init -q . && git add -A && git -c user.name=sanity -c user.email=sanity@localhost commit -qm sanity
# Empty ignore files are the contract: nothing is waived.
for f in tests/sanity/ignore-*.txt; do
  [[ -e "$f" ]] || continue
  if [[ -s "$f" ]]; then echo "sanity: $f is not empty" >&2; exit 1; fi
done
exec ansible-test sanity --python "$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
  --venv --color no "$@"
