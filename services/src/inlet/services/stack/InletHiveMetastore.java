import java.net.InetSocketAddress;
import java.util.concurrent.TimeUnit;

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
}
