import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.Provider;
import java.security.Security;
import java.util.Collections;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import javax.security.auth.callback.CallbackHandler;
import javax.security.sasl.SaslException;
import javax.security.sasl.SaslServer;
import javax.security.sasl.SaslServerFactory;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.util.Progressable;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.MetaStoreUtils;
import org.apache.hadoop.hive.metastore.TSetIpAddressProcessor;
import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.hadoop.hive.shims.ShimLoader;
import org.apache.hadoop.hive.thrift.HadoopThriftAuthBridge;
import org.apache.hadoop.security.SecurityUtil;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.thrift.TProcessor;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TServer;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TSSLTransportFactory;
import org.apache.thrift.transport.TSaslServerTransport;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.TTransportFactory;

/**
 * Hive Metastore 2.3's Thrift service bound to one address (Inlet's embedded metastore).
 *
 * <p>{@code HiveMetaStore.main} always listens on every interface: Hive 2.3 has no bind-host setting
 * for the metastore (Hive 3 added {@code metastore.thrift.bind.host}). This launcher serves the same
 * handler ({@code HiveMetaStore.newRetryingHMSHandler}, the class Hive's own server wraps, with the
 * {@code TSetIpAddressProcessor} its unsecured server uses, buffered transport and the binary
 * protocol) from a {@code TServerSocket} bound to the given host. Configuration comes from the
 * {@code hive-site.xml} on the classpath, as for {@code HiveMetaStore}.
 *
 * <p>Tables on S3 ({@code s3a://} locations, as catalog sync registers them): PySpark's jars hold no
 * {@code hadoop-aws}, so {@code fs.s3a.impl} is {@link CatalogOnlyFileSystem}, which lets the
 * metastore record such locations without touching the store.
 *
 * <p>Security, for tests of clients: {@code hive.metastore.use.SSL=true} serves TLS with the keystore
 * of {@code hive.metastore.keystore.path}/{@code .password}, as Hive's own server does (through
 * thrift's {@code TSSLTransportFactory}). {@code metastore.authentication=CONFIG} asks for SASL PLAIN
 * with the one user of {@code metastore.authentication.config.username}/{@code .password}, as Hive 4's
 * metastore does (Hive 2.3 has no PLAIN). {@code hive.metastore.sasl.enabled=true} serves Kerberos
 * (GSSAPI) with {@code hive.metastore.kerberos.principal}/{@code .keytab.file}, as Hive 2.3 does
 * (without its delegation tokens); the JVM needs {@code -Djava.security.krb5.conf}.
 *
 * <p>Usage: {@code java -cp CONF:JARS InletHiveMetastore HOST PORT}. Prints {@code INLET-HMS-SERVING
 * HOST:PORT} once the socket is bound; exits on SIGTERM.
 */
public final class InletHiveMetastore {
    private InletHiveMetastore() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: InletHiveMetastore HOST PORT");
            System.exit(2);
        }
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        HiveConf conf = new HiveConf(HiveMetaStore.HMSHandler.class);
        ThriftHiveMetastore.Iface handler =
                HiveMetaStore.newRetryingHMSHandler("inlet embedded metastore", conf, false);
        TServerSocket socket;
        if (conf.getBoolVar(HiveConf.ConfVars.HIVE_METASTORE_USE_SSL)) {
            TSSLTransportFactory.TSSLTransportParameters params =
                    new TSSLTransportFactory.TSSLTransportParameters();
            params.setKeyStore(conf.getVar(HiveConf.ConfVars.HIVE_METASTORE_SSL_KEYSTORE_PATH),
                    conf.getVar(HiveConf.ConfVars.HIVE_METASTORE_SSL_KEYSTORE_PASSWORD));
            socket = TSSLTransportFactory.getServerSocket(port, 0, InetAddress.getByName(host), params);
        } else {
            socket = new TServerSocket(new InetSocketAddress(host, port));
        }
        TTransportFactory transportFactory = new TTransportFactory();
        TProcessor processor = new TSetIpAddressProcessor<>(handler);
        if (conf.getBoolVar(HiveConf.ConfVars.METASTORE_USE_THRIFT_SASL)) {
            // Kerberos, as HiveMetaStore.startMetaStore sets it up (without delegation tokens)
            conf.set("hadoop.security.authentication", "kerberos");
            UserGroupInformation.setConfiguration(conf);
            String principal = SecurityUtil.getServerPrincipal(
                    conf.getVar(HiveConf.ConfVars.METASTORE_KERBEROS_PRINCIPAL), host);
            HadoopThriftAuthBridge.Server saslServer = ShimLoader.getHadoopThriftAuthBridge()
                    .createServer(conf.getVar(HiveConf.ConfVars.METASTORE_KERBEROS_KEYTAB_FILE), principal);
            transportFactory = saslServer.createTransportFactory(
                    MetaStoreUtils.getMetaStoreSaslProperties(conf));
            processor = saslServer.wrapProcessor(new ThriftHiveMetastore.Processor<>(handler));
        } else if ("CONFIG".equalsIgnoreCase(conf.get("metastore.authentication", ""))) {
            Security.addProvider(new PlainProvider());
            String user = conf.get("metastore.authentication.config.username", "");
            String password = conf.get("metastore.authentication.config.password", "");
            TSaslServerTransport.Factory sasl = new TSaslServerTransport.Factory();
            sasl.addServerDefinition("PLAIN", "hive", host, Collections.emptyMap(),
                    callbacks -> {});
            PlainServer.expected(user, password);
            transportFactory = sasl;
            processor = new ThriftHiveMetastore.Processor<>(handler); // no TSocket under SASL
        }
        int minThreads = conf.getIntVar(HiveConf.ConfVars.METASTORESERVERMINTHREADS);
        int maxThreads = conf.getIntVar(HiveConf.ConfVars.METASTORESERVERMAXTHREADS);
        TThreadPoolServer.Args serverArgs = new TThreadPoolServer.Args(socket)
                .processor(processor)
                .transportFactory(transportFactory)
                .protocolFactory(new TBinaryProtocol.Factory())
                .inputProtocolFactory(new TBinaryProtocol.Factory())
                .minWorkerThreads(minThreads)
                .maxWorkerThreads(maxThreads)
                .stopTimeoutVal(2)
                .stopTimeoutUnit(TimeUnit.SECONDS);
        TServer server = new TThreadPoolServer(serverArgs);
        Runtime.getRuntime().addShutdownHook(new Thread(server::stop, "inlet-hms-shutdown"));
        System.out.println("INLET-HMS-SERVING " + host + ":" + port);
        System.out.flush();
        server.serve();
    }

    /** The SASL PLAIN server mechanism (RFC 4616) the JDK lacks, for {@link PlainServer}. */
    public static final class PlainProvider extends Provider {
        public PlainProvider() {
            super("InletSaslPlain", "1.0", "SASL PLAIN server of the embedded metastore");
            put("SaslServerFactory.PLAIN", PlainFactory.class.getName());
        }
    }

    public static final class PlainFactory implements SaslServerFactory {
        @Override
        public SaslServer createSaslServer(String mechanism, String protocol, String serverName,
                Map<String, ?> props, CallbackHandler cbh) {
            return "PLAIN".equals(mechanism) ? new PlainServer() : null;
        }

        @Override
        public String[] getMechanismNames(Map<String, ?> props) {
            return new String[] {"PLAIN"};
        }
    }

    /** Accepts one user and password (metastore.authentication.config.*); anything else fails. */
    public static final class PlainServer implements SaslServer {
        private static volatile byte[] expectedUser = new byte[0];
        private static volatile byte[] expectedPassword = new byte[0];
        private String authorized;

        static void expected(String user, String password) {
            expectedUser = user.getBytes(StandardCharsets.UTF_8);
            expectedPassword = password.getBytes(StandardCharsets.UTF_8);
        }

        @Override
        public String getMechanismName() {
            return "PLAIN";
        }

        @Override
        public byte[] evaluateResponse(byte[] response) throws SaslException {
            String[] parts = new String(response, StandardCharsets.UTF_8).split("\u0000", -1);
            if (parts.length != 3) {
                throw new SaslException("malformed PLAIN response");
            }
            boolean ok = MessageDigest.isEqual(parts[1].getBytes(StandardCharsets.UTF_8), expectedUser)
                    & MessageDigest.isEqual(parts[2].getBytes(StandardCharsets.UTF_8), expectedPassword);
            if (!ok) {
                throw new SaslException("authentication failed for user " + parts[1]);
            }
            authorized = parts[1];
            return new byte[0];
        }

        @Override
        public boolean isComplete() {
            return authorized != null;
        }

        @Override
        public String getAuthorizationID() {
            return authorized;
        }

        @Override
        public byte[] unwrap(byte[] incoming, int offset, int len) {
            throw new IllegalStateException("PLAIN has no security layer");
        }

        @Override
        public byte[] wrap(byte[] outgoing, int offset, int len) {
            throw new IllegalStateException("PLAIN has no security layer");
        }

        @Override
        public Object getNegotiatedProperty(String propName) {
            return null;
        }

        @Override
        public void dispose() {}
    }

    /**
     * A file system that holds nothing and refuses reads and writes: every path is an existing
     * directory. The metastore only checks (and would make) a table's or partition's directory when
     * it records the location; the files are the writers' business, on the real store.
     */
    public static final class CatalogOnlyFileSystem extends FileSystem {
        private URI uri;
        private Path workingDir = new Path("/");

        @Override
        public void initialize(URI name, Configuration conf) throws IOException {
            super.initialize(name, conf);
            setConf(conf);
            uri = URI.create(name.getScheme() + "://" + (name.getAuthority() == null ? "" : name.getAuthority()));
        }

        @Override
        public String getScheme() {
            return uri == null ? "s3a" : uri.getScheme();
        }

        @Override
        public URI getUri() {
            return uri;
        }

        @Override
        public FSDataInputStream open(Path f, int bufferSize) throws IOException {
            throw new IOException("the embedded metastore does not read " + f);
        }

        @Override
        public FSDataOutputStream create(Path f, FsPermission permission, boolean overwrite, int bufferSize,
                short replication, long blockSize, Progressable progress) throws IOException {
            throw new IOException("the embedded metastore does not write " + f);
        }

        @Override
        public FSDataOutputStream append(Path f, int bufferSize, Progressable progress) throws IOException {
            throw new IOException("the embedded metastore does not write " + f);
        }

        @Override
        public boolean rename(Path src, Path dst) {
            return false;
        }

        @Override
        public boolean delete(Path f, boolean recursive) {
            return false;
        }

        @Override
        public FileStatus[] listStatus(Path f) {
            return new FileStatus[0];
        }

        @Override
        public void setWorkingDirectory(Path dir) {
            workingDir = dir;
        }

        @Override
        public Path getWorkingDirectory() {
            return workingDir;
        }

        @Override
        public boolean mkdirs(Path f, FsPermission permission) {
            return true;
        }

        @Override
        public FileStatus getFileStatus(Path f) {
            return new FileStatus(0, true, 1, 0, 0, makeQualified(f));
        }
    }
}
