// Package chroot runs commands in, and copies files into and out of, a
// root filesystem on the local machine through chroot(8). Its Communicator
// implements Packer's communicator interface, so provisioners work on the
// tree as they would on a remote machine.
//
// Packer's SDK ships a chroot communicator too; this one exists because
// that one ignores cancellation, lets the host shell expand the command
// and has no DownloadDir.
package chroot
