#!/usr/bin/env bash
# curl against `cinder serve smollm2-135m` (default http://127.0.0.1:8080; CINDER_URL overrides).
# Add `-H "Authorization: Bearer $CINDER_API_KEY"` when the server was started with --api-key.
set -euo pipefail
URL="${CINDER_URL:-http://127.0.0.1:8080}"

# Chat, one JSON answer.
curl -s "$URL/v1/chat/completions" -H 'content-type: application/json' -d '{
  "model": "smollm2-135m",
  "messages": [{"role": "user", "content": "What is the capital of France?"}],
  "max_tokens": 32, "temperature": 0
}'
echo

# Text completion, streamed as Server-Sent Events (ends with `data: [DONE]`), usage in a last chunk.
curl -sN "$URL/v1/completions" -H 'content-type: application/json' -d '{
  "model": "smollm2-135m", "prompt": "Once upon a time", "max_tokens": 24,
  "stream": true, "stream_options": {"include_usage": true}
}'

# Probes and metrics.
curl -s "$URL/health"; echo
curl -s "$URL/ready"; echo
curl -s "$URL/metrics" | grep -E '^cinder_(queue_depth|running_sequences|kv_blocks_used) '
