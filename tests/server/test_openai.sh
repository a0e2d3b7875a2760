#!/usr/bin/env bash
# test_openai.sh — glesc-server through the official OpenAI client for
# Node.js (openai_client.mjs): a streamed chat, a whole one, response_format
# and the errors as the client sees them. Skips (77) where node or the
# client package is absent: `npm ci --prefix tests/server` installs it
# (tools/dev.sh test does).
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
command -v node >/dev/null || skip "node is not installed (apt-get install nodejs npm)"
[ -f "$here/node_modules/openai/package.json" ] ||
    skip "the openai npm package is not installed: npm ci --prefix tests/server"
synth_model
server_start -np 2 --api-key test-key
GLESC_SERVER_URL=$SERVER_URL node --test "$here/openai_client.mjs" || die "node --test failed"
server_stop
[ "$SERVER_RC" = 0 ] || die "glesc-server exited $SERVER_RC after SIGTERM"
