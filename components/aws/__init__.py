"""What gets deployed on AWS: network, EKS cluster, GPU nodes, FSx, identity, the image build, Karpenter, wiring."""
