// JGit driver for the gixd client matrix (tests/clients/matrix.py), against Debian's libjgit-java 4.11.
//
//   JGitClient clone URL DIR [--depth N] [--protocol V] [--bare]
//   JGitClient fetch DIR [--protocol V]
//   JGitClient push DIR SRC:DST [--force]
//   JGitClient delete DIR REFNAME
//
// JGit 4.11 speaks protocol v0 only and has no shallow clone: those requests exit 3.
import java.io.File;
import java.util.ArrayList;
import java.util.List;

import org.eclipse.jgit.api.CloneCommand;
import org.eclipse.jgit.api.FetchCommand;
import org.eclipse.jgit.api.Git;
import org.eclipse.jgit.api.PushCommand;
import org.eclipse.jgit.transport.CredentialsProvider;
import org.eclipse.jgit.transport.PushResult;
import org.eclipse.jgit.transport.RefSpec;
import org.eclipse.jgit.transport.RemoteRefUpdate;
import org.eclipse.jgit.transport.TagOpt;
import org.eclipse.jgit.transport.UsernamePasswordCredentialsProvider;

public class JGitClient {
    static void die(int code, String msg) {
        System.err.println("jgit: " + msg);
        System.exit(code);
    }

    static CredentialsProvider credentials() {
        String user = System.getenv("GIXD_CLIENT_USER");
        String pass = System.getenv("GIXD_CLIENT_PASSWORD");
        if ((user == null || user.isEmpty()) && (pass == null || pass.isEmpty())) return null;
        return new UsernamePasswordCredentialsProvider(user == null ? "" : user, pass == null ? "" : pass);
    }

    public static void main(String[] argv) {
        if (argv.length < 1) die(2, "usage: clone|fetch|push|delete ...");
        String cmd = argv[0];
        List<String> pos = new ArrayList<>();
        int depth = 0;
        String protocol = null;
        boolean bare = false, force = false;
        for (int i = 1; i < argv.length; i++) {
            String a = argv[i];
            switch (a) {
                case "--depth": depth = Integer.parseInt(argv[++i]); break;
                case "--protocol": protocol = argv[++i]; break;
                case "--bare": bare = true; break;
                case "--force": force = true; break;
                default:
                    if (a.startsWith("--")) die(2, "unknown option " + a);
                    pos.add(a);
            }
        }
        if (protocol != null && !protocol.matches("v?[01]"))
            die(3, "JGit 4.11 speaks protocol v0 only (asked for " + protocol + ")");
        if (depth > 0) die(3, "JGit 4.11 has no shallow clone (--depth)");
        CredentialsProvider creds = credentials();
        try {
            switch (cmd) {
                case "clone": {
                    if (pos.size() != 2) die(2, "usage: clone URL DIR");
                    CloneCommand c = Git.cloneRepository().setURI(pos.get(0)).setDirectory(new File(pos.get(1)))
                        .setBare(bare).setCloneAllBranches(true);
                    if (creds != null) c.setCredentialsProvider(creds);
                    try (Git g = c.call()) { }
                    break;
                }
                case "fetch": {
                    if (pos.size() != 1) die(2, "usage: fetch DIR");
                    try (Git g = Git.open(new File(pos.get(0)))) {
                        FetchCommand f = g.fetch().setRemote("origin")
                            .setRefSpecs(new RefSpec("+refs/heads/*:refs/remotes/origin/*"),
                                         new RefSpec("+refs/tags/*:refs/tags/*"))
                            .setTagOpt(TagOpt.FETCH_TAGS);
                        if (creds != null) f.setCredentialsProvider(creds);
                        f.call();
                    }
                    break;
                }
                case "push":
                case "delete": {
                    if (pos.size() != 2) die(2, "usage: push DIR SRC:DST | delete DIR REF");
                    String spec = cmd.equals("delete") ? ":" + pos.get(1) : pos.get(1);
                    try (Git g = Git.open(new File(pos.get(0)))) {
                        PushCommand p = g.push().setRemote("origin").setRefSpecs(new RefSpec(spec)).setForce(force);
                        if (creds != null) p.setCredentialsProvider(creds);
                        boolean ok = true;
                        for (PushResult r : p.call()) {
                            for (RemoteRefUpdate u : r.getRemoteUpdates()) {
                                RemoteRefUpdate.Status s = u.getStatus();
                                if (s != RemoteRefUpdate.Status.OK && s != RemoteRefUpdate.Status.UP_TO_DATE) {
                                    ok = false;
                                    System.err.println("jgit: " + u.getRemoteName() + " " + s
                                        + (u.getMessage() != null ? " (" + u.getMessage() + ")" : ""));
                                }
                            }
                        }
                        if (!ok) System.exit(1);
                    }
                    break;
                }
                default:
                    die(2, "unknown command " + cmd);
            }
        } catch (Exception e) {
            StringBuilder sb = new StringBuilder(e.toString());
            for (Throwable t = e.getCause(); t != null; t = t.getCause()) sb.append("\n  caused by: ").append(t);
            die(1, sb.toString());
        }
    }
}
