#!/bin/sh
# mqbed compose: one ActiveMQ broker configured from deploy/activemq/ (the local backend's
# activemq.xml and log4j.properties, mounted at /mqbed/deploy/activemq) and environment variables.
# Works with the official image (/opt/apache-activemq) and the offline Debian image.
#   MQBED_USER, MQBED_PASSWORD      generated credentials (compose/.env)
#   MQBED_BIND                      listen address: 0.0.0.0 (bridge) or 127.0.0.1 (host network)
#   MQBED_STOMP_PORT, MQBED_OPENWIRE_PORT, MQBED_ACTIVEMQ_MEMORY_MB, MQBED_ACTIVEMQ_HEAP_MB
set -eu
: "${MQBED_USER:?MQBED_USER is not set: generate compose/.env first}"
: "${MQBED_PASSWORD:?MQBED_PASSWORD is not set: generate compose/.env first}"
templates=/mqbed/deploy/activemq
base="${MQBED_ACTIVEMQ_BASE:-/var/lib/mqbed-activemq}"
home=/opt/apache-activemq
[ -d "$home" ] || home=/usr/share/activemq
bind="${MQBED_BIND:-0.0.0.0}"
mem="${MQBED_ACTIVEMQ_MEMORY_MB:-256}"
mkdir -p "$base/conf" "$base/data" "$base/tmp" "$base/lib" "$base/log"
sed -e "s|127\.0\.0\.1|$bind|g" "$templates/activemq.xml" > "$base/conf/activemq.xml"
cp "$templates/log4j.properties" "$base/conf/"
for jar in xstream jettison; do     # Debian: needed for MapMessages over STOMP (statistics)
    if [ -e "/usr/share/java/$jar.jar" ]; then ln -sf "/usr/share/java/$jar.jar" "$base/lib/$jar.jar"; fi
done
umask 077
cat > "$base/conf/mqbed.properties" <<PROPS
# written by compose/activemq/entrypoint.sh; holds credentials
mqbed.broker.name=mqbed-compose
mqbed.username=$MQBED_USER
mqbed.password=$MQBED_PASSWORD
mqbed.memory.limit=$mem mb
mqbed.store.limit=${MQBED_ACTIVEMQ_STORE_MB:-4096} mb
mqbed.temp.limit=${MQBED_ACTIVEMQ_TEMP_MB:-1024} mb
mqbed.stomp.port=${MQBED_STOMP_PORT:-61613}
mqbed.openwire.port=${MQBED_OPENWIRE_PORT:-61616}
PROPS
java="java"
if [ -n "${JAVA_HOME:-}" ]; then java="$JAVA_HOME/bin/java"; fi
exec "$java" -Xms64m "-Xmx${MQBED_ACTIVEMQ_HEAP_MB:-$((mem * 2 > 512 ? mem * 2 : 512))}m" \
    -Djava.awt.headless=true \
    --add-reads=java.xml=java.logging \
    --add-opens=java.base/java.security=ALL-UNNAMED \
    --add-opens=java.base/java.net=ALL-UNNAMED \
    --add-opens=java.base/java.lang=ALL-UNNAMED \
    --add-opens=java.base/java.util=ALL-UNNAMED \
    --add-opens=java.naming/javax.naming.spi=ALL-UNNAMED \
    --add-opens=java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED \
    --add-opens=java.base/java.util.concurrent=ALL-UNNAMED \
    --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED \
    --add-exports=java.base/sun.net.www.protocol.http=ALL-UNNAMED \
    --add-exports=java.base/sun.net.www.protocol.https=ALL-UNNAMED \
    --add-exports=java.base/sun.net.www.protocol.jar=ALL-UNNAMED \
    --add-exports=jdk.xml.dom/org.w3c.dom.html=ALL-UNNAMED \
    --add-exports=jdk.naming.rmi/com.sun.jndi.url.rmi=ALL-UNNAMED \
    "-Dactivemq.classpath=$base/conf" "-Dactivemq.home=$home" "-Dactivemq.base=$base" \
    "-Dactivemq.conf=$base/conf" "-Dactivemq.data=$base/data" "-Djava.io.tmpdir=$base/tmp" \
    "-Dlog4j.configuration=file:$base/conf/log4j.properties" \
    -jar "$home/bin/activemq.jar" start "xbean:file:$base/conf/activemq.xml"
