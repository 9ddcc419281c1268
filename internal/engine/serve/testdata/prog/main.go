// Command prog is the tiny static program the serve tests run in a FROM
// scratch image. Its arguments are steps run in order:
//
//	print:N        print N numbered lines (line-1 .. line-N) to stdout
//	eprint:TEXT    print TEXT to stderr
//	nap:MS         sleep MS milliseconds
//	write:PATH     write PATH; on failure print the error and exit 3
//	ignoreterm     ignore SIGTERM from now on
//	sleep          sleep until signalled (SIGTERM exits 0 unless ignored)
//	exit:CODE      exit with CODE
//	ids            print "uid=U gid=G"
//	ls:DIR         print each entry of DIR as "ls NAME char|dir|file"
//	limits         print /proc/self/limits' locked-memory and stack lines
//	cat:PATH       print the file at PATH
//	env:NAME       print NAME=VALUE from the environment
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ignore := false
	for _, step := range os.Args[1:] {
		verb, arg, _ := strings.Cut(step, ":")
		switch verb {
		case "print":
			n, _ := strconv.Atoi(arg)
			for i := 1; i <= n; i++ {
				fmt.Printf("line-%d\n", i)
			}
		case "eprint":
			fmt.Fprintln(os.Stderr, arg)
		case "env":
			fmt.Printf("%s=%s\n", arg, os.Getenv(arg))
		case "nap":
			ms, _ := strconv.Atoi(arg)
			time.Sleep(time.Duration(ms) * time.Millisecond)
		case "write":
			if err := os.WriteFile(arg, []byte("x"), 0o644); err != nil {
				fmt.Println("write failed:", err)
				os.Exit(3)
			}
			fmt.Println("wrote", arg)
		case "ignoreterm":
			ignore = true
			signal.Ignore(syscall.SIGTERM)
		case "sleep":
			if ignore {
				for {
					time.Sleep(time.Hour)
				}
			}
			ch := make(chan os.Signal, 1)
			signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
			<-ch
			fmt.Println("got signal, exiting")
			os.Exit(0)
		case "ids":
			fmt.Printf("uid=%d gid=%d\n", os.Getuid(), os.Getgid())
		case "ls":
			ents, err := os.ReadDir(arg)
			if err != nil {
				fmt.Println("ls failed:", err)
				os.Exit(3)
			}
			for _, e := range ents {
				kind := "file"
				switch {
				case e.Type()&os.ModeCharDevice != 0:
					kind = "char"
				case e.IsDir():
					kind = "dir"
				}
				fmt.Println("ls", e.Name(), kind)
			}
		case "limits":
			b, _ := os.ReadFile("/proc/self/limits")
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "Max locked memory") || strings.HasPrefix(l, "Max stack size") {
					fmt.Println(strings.Join(strings.Fields(l), " "))
				}
			}
		case "cat":
			b, err := os.ReadFile(arg)
			if err != nil {
				fmt.Println("cat failed:", err)
				os.Exit(3)
			}
			fmt.Print(string(b))
		case "exit":
			code, _ := strconv.Atoi(arg)
			os.Exit(code)
		default:
			fmt.Println("unknown step", step)
			os.Exit(2)
		}
	}
}
