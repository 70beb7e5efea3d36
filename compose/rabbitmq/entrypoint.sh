#!/bin/sh
# mqbed compose: render deploy/rabbitmq/ (the local backend's templates, mounted at
# /mqbed/deploy/rabbitmq) from environment variables, then start RabbitMQ — through the official
# image's docker-entrypoint.sh when present, else Debian's rabbitmq-server (offline image).
#   MQBED_USER, MQBED_PASSWORD       generated credentials (compose/.env)
#   MQBED_BIND                       listen address: 0.0.0.0 (bridge network) or 127.0.0.1 (host)
#   MQBED_AMQP_PORT, MQBED_MANAGEMENT_PORT, MQBED_PROMETHEUS_PORT   listener ports
#   MQBED_ERLANG_COOKIE              written to $HOME/.erlang.cookie (clusters need one cookie)
#   MQBED_RABBITMQ_EXTRA             extra rabbitmq.conf lines (cluster formation)
set -eu
: "${MQBED_USER:?MQBED_USER is not set: generate compose/.env first}"
: "${MQBED_PASSWORD:?MQBED_PASSWORD is not set: generate compose/.env first}"
templates=/mqbed/deploy/rabbitmq
conf=/tmp/mqbed-rabbitmq
bind="${MQBED_BIND:-0.0.0.0}"
esc() { printf '%s' "$1" | sed -e 's/[\\|&]/\\&/g'; }
mkdir -p "$conf/conf.d"
umask 077
sed -e "s|127\.0\.0\.1|$(esc "$bind")|g" \
    -e "s|\$amqp_port|${MQBED_AMQP_PORT:-5672}|g" \
    -e "s|\$management_port|${MQBED_MANAGEMENT_PORT:-15672}|g" \
    -e "s|\$prometheus_port|${MQBED_PROMETHEUS_PORT:-15692}|g" \
    -e "s|\$username|$(esc "$MQBED_USER")|g" \
    -e "s|\$password|$(esc "$MQBED_PASSWORD")|g" \
    -e '/^\$extra$/d' \
    -e 's|\$\$|$|g' \
    "$templates/rabbitmq.conf.tmpl" > "$conf/rabbitmq.conf"
# Logs to the console as well, so `docker compose logs rabbitmq` shows them.
printf '\nlog.console = true\nlog.console.level = info\n' >> "$conf/rabbitmq.conf"
if [ -n "${MQBED_RABBITMQ_EXTRA:-}" ]; then
    printf '%s\n' "$MQBED_RABBITMQ_EXTRA" >> "$conf/rabbitmq.conf"
fi
cp "$templates/enabled_plugins" "$templates/advanced.config" "$conf/"
: > "$conf/rabbitmq-env.conf"
export RABBITMQ_CONFIG_FILE="$conf/rabbitmq.conf"
export RABBITMQ_CONFIG_FILES="$conf/conf.d"   # not the image's conf.d (its listeners clash)
export RABBITMQ_ADVANCED_CONFIG_FILE="$conf/advanced.config"
export RABBITMQ_ENABLED_PLUGINS_FILE="$conf/enabled_plugins"
export RABBITMQ_CONF_ENV_FILE="$conf/rabbitmq-env.conf"
export HOME="${HOME:-/var/lib/rabbitmq}"
mkdir -p "$HOME"
if [ -n "${MQBED_ERLANG_COOKIE:-}" ]; then
    rm -f "$HOME/.erlang.cookie"
    printf '%s' "$MQBED_ERLANG_COOKIE" > "$HOME/.erlang.cookie"
    chmod 400 "$HOME/.erlang.cookie"
fi
if command -v docker-entrypoint.sh >/dev/null 2>&1; then     # official image
    chmod -R a+rX "$conf"
    if id rabbitmq >/dev/null 2>&1; then chown -R rabbitmq "$conf" "$HOME/.erlang.cookie" 2>/dev/null || true; fi
    exec docker-entrypoint.sh rabbitmq-server
fi
# Debian's server script: exec the VM itself (RABBITMQ_ALLOW_INPUT) so it gets SIGTERM.
export RABBITMQ_ALLOW_INPUT=true
export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="${RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS:-} -noinput"
exec /usr/lib/rabbitmq/bin/rabbitmq-server
