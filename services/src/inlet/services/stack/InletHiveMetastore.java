import java.io.IOException;
import java.net.URI;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.util.Progressable;

/**
 * What Inlet's embedded Hive Metastore 4 adds to Apache Hive's own server ({@code
 * org.apache.hadoop.hive.metastore.HiveMetaStore}, which binds {@code metastore.thrift.bind.host} and
 * serves TLS, SASL PLAIN and Kerberos by its own settings): a file system for {@code s3a://} table
 * locations. The metastore's classpath holds no {@code hadoop-aws}, so {@code fs.s3a.impl} is {@link
 * CatalogOnlyFileSystem}, which lets the metastore record such locations without touching the store.
 */
public final class InletHiveMetastore {
    private InletHiveMetastore() {}

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
