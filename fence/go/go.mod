module github.com/tenure-dev/tenure/fence/go

go 1.22
