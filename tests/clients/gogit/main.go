// go-git driver for the gixd client matrix (tests/clients/matrix.py).
//
//	gogit clone URL DIR [--depth N] [--protocol V] [--bare]
//	gogit fetch DIR [--protocol V]
//	gogit push DIR SRC:DST [--force]
//	gogit delete DIR REFNAME
//
// Built offline from Debian's golang-github-go-git-go-git-dev sources (GOPATH mode).
// go-git speaks protocol v0 only: --protocol v2 exits 3.
package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	neturl "net/url"
)

func die(code int, format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "gogit: "+format+"\n", args...)
	os.Exit(code)
}

type opts struct {
	pos      []string
	depth    int
	protocol string
	bare     bool
	force    bool
}

func parse(args []string) opts {
	var o opts
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch a {
		case "--depth", "--protocol":
			if i+1 >= len(args) {
				die(2, "%s needs a value", a)
			}
			i++
			if a == "--depth" {
				n, err := strconv.Atoi(args[i])
				if err != nil {
					die(2, "bad --depth %q", args[i])
				}
				o.depth = n
			} else {
				o.protocol = args[i]
			}
		case "--bare":
			o.bare = true
		case "--force":
			o.force = true
		default:
			if strings.HasPrefix(a, "--") {
				die(2, "unknown option %s", a)
			}
			o.pos = append(o.pos, a)
		}
	}
	switch o.protocol {
	case "", "0", "v0", "1", "v1":
	default:
		die(3, "go-git 5.4 speaks protocol v0 only (asked for %s)", o.protocol)
	}
	return o
}

func auth(url string) transport.AuthMethod {
	if key := os.Getenv("GIXD_CLIENT_SSH_KEY"); strings.HasPrefix(url, "ssh://") && key != "" {
		u, err := neturl.Parse(url)
		if err != nil {
			die(1, "url %s: %v", url, err)
		}
		keys, err := gitssh.NewPublicKeysFromFile(u.User.Username(), key, "")
		if err != nil {
			die(1, "ssh key %s: %v", key, err)
		}
		if known := os.Getenv("GIXD_CLIENT_KNOWN_HOSTS"); known != "" {
			check, err := gitssh.NewKnownHostsCallback(known)
			if err != nil {
				die(1, "known_hosts %s: %v", known, err)
			}
			keys.HostKeyCallback = check
		}
		return keys
	}
	user, pass := os.Getenv("GIXD_CLIENT_USER"), os.Getenv("GIXD_CLIENT_PASSWORD")
	if !strings.HasPrefix(url, "http") || (user == "" && pass == "") {
		return nil
	}
	return &githttp.BasicAuth{Username: user, Password: pass}
}

func originURL(r *git.Repository) string {
	rem, err := r.Remote("origin")
	if err != nil {
		die(1, "no origin remote: %v", err)
	}
	return rem.Config().URLs[0]
}

func open(dir string) *git.Repository {
	r, err := git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{DetectDotGit: false})
	if err != nil {
		die(1, "open %s: %v", dir, err)
	}
	return r
}

func main() {
	if len(os.Args) < 2 {
		die(2, "usage: gogit clone|fetch|push|delete ...")
	}
	cmd := os.Args[1]
	o := parse(os.Args[2:])
	need := map[string]int{"clone": 2, "fetch": 1, "push": 2, "delete": 2}
	if n, ok := need[cmd]; !ok || len(o.pos) != n {
		die(2, "usage: gogit clone URL DIR | fetch DIR | push DIR SRC:DST | delete DIR REF")
	}
	switch cmd {
	case "clone":
		url, dir := o.pos[0], o.pos[1]
		_, err := git.PlainClone(dir, o.bare, &git.CloneOptions{
			URL:   url,
			Auth:  auth(url),
			Depth: o.depth,
			Tags:  git.AllTags,
		})
		if err != nil {
			die(1, "clone: %v", err)
		}
	case "fetch":
		r := open(o.pos[0])
		url := originURL(r)
		err := r.Fetch(&git.FetchOptions{
			RemoteName: "origin",
			RefSpecs: []config.RefSpec{
				"+refs/heads/*:refs/remotes/origin/*",
				"+refs/tags/*:refs/tags/*",
			},
			Tags: git.AllTags,
			Auth: auth(url),
		})
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			die(1, "fetch: %v", err)
		}
	case "push", "delete":
		r := open(o.pos[0])
		url := originURL(r)
		spec := o.pos[1]
		if cmd == "delete" {
			spec = ":" + spec
		} else if o.force && !strings.HasPrefix(spec, "+") {
			spec = "+" + spec
		}
		rs := config.RefSpec(spec)
		if err := rs.Validate(); err != nil {
			die(2, "bad refspec %q: %v", spec, err)
		}
		err := r.Push(&git.PushOptions{
			RemoteName: "origin",
			RefSpecs:   []config.RefSpec{rs},
			Auth:       auth(url),
			Force:      o.force,
		})
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			die(1, "push: %v", err)
		}
	}
}
