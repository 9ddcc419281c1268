package tardir

import (
	"archive/tar"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Write writes dir as a tar stream whose entries lie under the path dest
// (absolute or not; parents included). Symlinks are copied as links,
// never followed.
func Write(w io.Writer, dir, dest string) error {
	return tarDir(w, dir, strings.TrimPrefix(dest, "/"))
}

// tarDir writes dir as a tar stream whose entries lie under prefix (the
// destination path without its leading slash), parents included. Symlinks
// are copied as links, never followed.
func tarDir(w io.Writer, dir, prefix string) error {
	tw := tar.NewWriter(w)
	// Parent directories of the destination, so it exists in the image.
	parts := strings.Split(path.Dir(prefix), "/")
	for i := range parts {
		if parts[i] == "." || parts[i] == "" {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.Join(parts[:i+1], "/") + "/", Mode: 0o755}); err != nil {
			return err
		}
	}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = path.Join(prefix, filepath.ToSlash(rel))
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
