// JGit's git:// daemon for the bake-off: upload-pack and receive-pack over every repository
// below the base path (export-all), on 127.0.0.1:<port>. Compiled by the harness with javac.
import java.io.File;
import java.net.InetSocketAddress;
import org.eclipse.jgit.transport.Daemon;
import org.eclipse.jgit.transport.DaemonClient;
import org.eclipse.jgit.transport.resolver.FileResolver;

public class JGitDaemon {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        Daemon daemon = new Daemon(new InetSocketAddress("127.0.0.1", port));
        daemon.setRepositoryResolver(new FileResolver<DaemonClient>(new File(args[1]), true));
        daemon.getService("git-receive-pack").setEnabled(true);
        daemon.start();
        Thread.currentThread().join();
    }
}
