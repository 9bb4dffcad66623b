module embedwire/scripts/weaviate-refill

go 1.23

require go.etcd.io/bbolt v1.4.3

require golang.org/x/sys v0.29.0 // indirect
