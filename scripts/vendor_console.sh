#!/bin/sh
# Re-vendor the console's third-party scripts from the npm registry, at the
# exact versions pinned here (docs/console.md, "Vendored code"). No CDN: the
# gateway serves these files itself, and the browser tests inject axe-core.
set -eu
MARKED=18.2.1
DOMPURIFY=3.4.18
AXE=4.14.1
root=$(cd "$(dirname "$0")/.." && pwd)
static="$root/naga_gateway/static/vendor"
tests="$root/tests/gateway/vendor"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
npm pack --silent "marked@$MARKED" "dompurify@$DOMPURIFY" "axe-core@$AXE" >/dev/null
for f in marked-$MARKED dompurify-$DOMPURIFY axe-core-$AXE; do
  mkdir "$f" && tar xzf "$f.tgz" -C "$f"
done
mkdir -p "$static" "$tests"
cp "marked-$MARKED/package/lib/marked.umd.js" "$static/marked.js"
cp "marked-$MARKED/package/LICENSE" "$static/marked.LICENSE.txt"
cp "dompurify-$DOMPURIFY/package/dist/purify.min.js" "$static/purify.js"
cp "dompurify-$DOMPURIFY/package/LICENSE" "$static/purify.LICENSE.txt"
cp "axe-core-$AXE/package/axe.min.js" "$tests/axe.min.js"
cp "axe-core-$AXE/package/LICENSE" "$tests/axe.LICENSE.txt"
printf 'marked %s\ndompurify %s\naxe-core %s\n' "$MARKED" "$DOMPURIFY" "$AXE" > "$static/VERSIONS"
cp "$static/VERSIONS" "$tests/VERSIONS"
echo "vendored: marked $MARKED, dompurify $DOMPURIFY (naga_gateway/static/vendor), axe-core $AXE (tests/gateway/vendor)"
