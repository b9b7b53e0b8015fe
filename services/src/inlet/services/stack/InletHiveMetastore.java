import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.util.concurrent.TimeUnit;

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
import org.apache.hadoop.hive.metastore.TSetIpAddressProcessor;
import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TServer;
import org.apache.thrift.server.TThreadPoolServer;
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
        TSetIpAddressProcessor<ThriftHiveMetastore.Iface> processor = new TSetIpAddressProcessor<>(handler);
        TServerSocket socket = new TServerSocket(new InetSocketAddress(host, port));
        int minThreads = conf.getIntVar(HiveConf.ConfVars.METASTORESERVERMINTHREADS);
        int maxThreads = conf.getIntVar(HiveConf.ConfVars.METASTORESERVERMAXTHREADS);
        TThreadPoolServer.Args serverArgs = new TThreadPoolServer.Args(socket)
                .processor(processor)
                .transportFactory(new TTransportFactory())
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
