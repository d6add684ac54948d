"""The Ray Serve application: ingress, deployments, composition and `hygraph serve`."""
