# Warp-level emulation of ldmatrix / mma.sync m16n8k16 (PTX ISA fragment layouts) to check the index
# maths of attention.cu's v2 kernels (k_att_fwd_tc2, k_att_bwd_fused_tc, transliterated phase by phase
# between barriers) against a float64 reference, without a GPU. No rounding to bf16: errors ~1e-16.
# Needs numpy (Debian: apt-get install python3-numpy; /usr/bin/python3 bench/kernels/attention_emu.py).
# T=1: dq = dk = 0 exactly, so their relative error reads 1 (meaningless), as in the CUDA test.
import numpy as np
LD=72; BR=64; D=64
lanes=np.arange(32)

def ldsm_x4(tile, rowcol):            # rowcol(lane) -> (row, col) address given by that lane
    r=np.zeros((32,4,2))
    for t in range(32):
        for i in range(4):
            row,col=rowcol(8*i+t//4)
            r[t,i,:]=tile[row, col+2*(t%4):col+2*(t%4)+2]
    return r
def ldsm_x4_t(tile, rowcol):
    r=np.zeros((32,4,2))
    for t in range(32):
        for i in range(4):
            for e in range(2):
                row,col=rowcol(8*i+2*(t%4)+e)
                r[t,i,e]=tile[row, col+t//4]
    return r
def mma(c, a, b0, b1):                 # c[32,4], a[32,4,2], b0/b1[32,2]
    A=np.zeros((16,16)); B=np.zeros((16,8))
    for t in range(32):
        g,q=t//4,t%4
        for e in range(2):
            A[g,2*q+e]=a[t,0,e]; A[g+8,2*q+e]=a[t,1,e]; A[g,2*q+8+e]=a[t,2,e]; A[g+8,2*q+8+e]=a[t,3,e]
            B[2*q+e,g]=b0[t,e]; B[2*q+8+e,g]=b1[t,e]
    C=A@B
    for t in range(32):
        g,q=t//4,t%4
        c[t,0]+=C[g,2*q]; c[t,1]+=C[g,2*q+1]; c[t,2]+=C[g+8,2*q]; c[t,3]+=C[g+8,2*q+1]

def load_a_frags(tile,row0):           # -> f[kk][32,4,2]
    return [ldsm_x4(tile, lambda l,kk=kk:(row0+(l&15), kk*16+(l>>4)*8)) for kk in range(4)]
def mma_abt(acc, a, x):                # acc[8][32,4]
    for kk in range(4):
        for np_ in range(4):
            b=ldsm_x4(x, lambda l:(np_*16+(l&7)+(l>>4)*8, kk*16+((l>>3)&1)*8))
            mma(acc[2*np_], a[kk], b[:,0], b[:,1]); mma(acc[2*np_+1], a[kk], b[:,2], b[:,3])
def pfrag(p,kk):                        # p[8][32,4] -> a[32,4,2]
    a=np.zeros((32,4,2))
    a[:,0]=p[2*kk][:,0:2]; a[:,1]=p[2*kk][:,2:4]; a[:,2]=p[2*kk+1][:,0:2]; a[:,3]=p[2*kk+1][:,2:4]
    return a
def mma_pb(acc, p, x):
    for kk in range(4):
        a=pfrag(p,kk)
        for dp in range(4):
            b=ldsm_x4_t(x, lambda l:(kk*16+(l&7)+((l>>3)&1)*8, dp*16+(l>>4)*8))
            mma(acc[2*dp], a, b[:,0], b[:,1]); mma(acc[2*dp+1], a, b[:,2], b[:,3])
def mma_ab(acc, a, x):
    for kk in range(4):
        for dp in range(4):
            b=ldsm_x4_t(x, lambda l:(kk*16+(l&7)+((l>>3)&1)*8, dp*16+(l>>4)*8))
            mma(acc[2*dp], a[kk], b[:,0], b[:,1]); mma(acc[2*dp+1], a[kk], b[:,2], b[:,3])
def zacc(): return [np.zeros((32,4)) for _ in range(8)]

def tile(g, r0, T):                    # rows r0.. of g (T x 64), zero beyond T, padded to LD
    s=np.zeros((BR,LD)); n=max(0,min(BR,T-r0))
    if n>0: s[:n,:D]=g[r0:r0+n]
    return s

def ref(q,k,v,do):
    T=q.shape[0]; sc=1/8
    S=q@k.T*sc; S[np.triu(np.ones((T,T),bool),1)]=-np.inf
    m=S.max(1,keepdims=True); P=np.exp(S-m); l=P.sum(1,keepdims=True); P/=l
    O=P@v; lse=(m+np.log(l))[:,0]
    dP=do@v.T; Dl=(do*O).sum(1,keepdims=True); dS=P*(dP-Dl)
    return O,lse,dS@k*sc,dS.T@q*sc,P.T@do,Dl[:,0]

LOG2E=1.4426950408889634
def fwd2(q,k,v):
    T=q.shape[0]; nqb=(T+127)//128; nk=(T+63)//64; sl2=LOG2E/8
    O=np.full((T,D),np.nan); L=np.full(T,np.nan)
    for qb in range(nqb):
        q0=qb*128; last=min((q0+127)//64, nk-1)
        sKV=[None]*4; sKV[2]=tile(q,q0,T); sKV[3]=tile(q,q0+64,T)
        W=[]
        for w in range(4):
            W.append(dict(qf=[load_a_frags(sKV[2+(w>>1)], (w&1)*32+mt*16) for mt in range(2)],
                          o=[zacc(),zacc()], m=np.full((2,32,2),-np.inf), l=np.zeros((2,32,2)), wr0=q0+w*32))
        for kt in range(last+1):
            Kt=tile(k,kt*64,T); Vt=tile(v,kt*64,T)
            for w in range(4):
                st=W[w]; wr0=st['wr0']
                if not (kt*64<=wr0+31): continue
                s=[zacc(),zacc()]
                for mt in range(2): mma_abt(s[mt], st['qf'][mt], Kt)
                diag = kt*64+63 > wr0
                for mt in range(2):
                    row0=wr0+mt*16+(lanes>>2)
                    mx=np.full((32,2),-np.inf)
                    for nt in range(8):
                        for e in range(4):
                            x=s[mt][nt][:,e]*sl2
                            if diag:
                                key=kt*64+nt*8+2*(lanes&3)+(e&1)
                                x=np.where(key>row0+8*(e>>1),-np.inf,x)
                            s[mt][nt][:,e]=x; mx[:,e>>1]=np.maximum(mx[:,e>>1],x)
                    for r in range(2):
                        for sh in (1,2): mx[:,r]=np.maximum(mx[:,r], mx[lanes^sh,r])
                        mn=np.maximum(st['m'][mt][:,r],mx[:,r])
                        with np.errstate(invalid='ignore'): corr=np.exp2(st['m'][mt][:,r]-mn)
                        st['l'][mt][:,r]*=corr
                        for nt in range(8): st['o'][mt][nt][:,2*r]*=corr; st['o'][mt][nt][:,2*r+1]*=corr
                        st['m'][mt][:,r]=mn
                    for nt in range(8):
                        for e in range(4):
                            p=np.exp2(s[mt][nt][:,e]-st['m'][mt][:,e>>1]); s[mt][nt][:,e]=p; st['l'][mt][:,e>>1]+=p
                for mt in range(2): mma_pb(st['o'][mt], s[mt], Vt)
        for w in range(4):
            st=W[w]
            for mt in range(2):
                l=st['l'][mt].copy()
                for r in range(2):
                    for sh in (1,2): l[:,r]=l[:,r]+l[lanes^sh,r]
                for t in range(32):
                    for half in range(2):
                        row=st['wr0']+mt*16+t//4+8*half
                        if row>=T: continue
                        for nt in range(8):
                            col=nt*8+2*(t&3)
                            O[row,col]=st['o'][mt][nt][t,2*half]/l[t,half]; O[row,col+1]=st['o'][mt][nt][t,2*half+1]/l[t,half]
                        L[row]=(st['m'][mt][t,half]+np.log2(l[t,half]))*np.log(2)
    return O,L

def fused(q,k,v,do,lse,delta):
    T=q.shape[0]; nq=(T+63)//64; sc=1/8; sl2=sc*LOG2E
    dqa=np.zeros((T,D)); dK=np.full((T,D),np.nan); dV=np.full((T,D),np.nan)
    for kt in range(nq):
        k0=kt*64; sK=tile(k,k0,T); sV=tile(v,k0,T)
        W=[dict(kf=load_a_frags(sK,w*16), vf=load_a_frags(sV,w*16), dk=zacc(), dv=zacc(),
                key=[k0+w*16+(lanes>>2), k0+w*16+(lanes>>2)+8]) for w in range(4)]
        for qt in range(kt,nq):
            q0=qt*64; sQ=tile(q,q0,T); sG=tile(do,q0,T)
            idx=q0+np.arange(64); ok=idx<T
            sL=np.where(ok, lse[np.minimum(idx,T-1)]*LOG2E, np.inf); sD=np.where(ok, delta[np.minimum(idx,T-1)],0)
            dpts=[]
            for w in range(4):
                st=W[w]; s_=zacc(); dp=zacc()
                mma_abt(s_, st['kf'], sQ); mma_abt(dp, st['vf'], sG)
                for nt in range(8):
                    for e in range(4):
                        qc=nt*8+2*(lanes&3)+(e&1)
                        p=np.exp2(s_[nt][:,e]*sl2-sL[qc])
                        if qt==kt: p=np.where(q0+qc<st['key'][e>>1],0,p)
                        s_[nt][:,e]=p; dp[nt][:,e]=p*(dp[nt][:,e]-sD[qc])
                mma_pb(st['dv'], s_, sG); mma_pb(st['dk'], dp, sQ); dpts.append(dp)
            sS=np.full((64,LD),np.nan)      # sG[cur] reused: all old contents must be overwritten where read
            sS[:, :]=sG
            for w in range(4):
                for nt in range(8):
                    for e in range(4):
                        qc=nt*8+2*(lanes&3)+(e&1); kc=w*16+(lanes>>2)+8*(e>>1)
                        sS[qc,kc]=dpts[w][nt][:,e]
            for w in range(4):
                sf=load_a_frags(sS,w*16); dq=zacc(); mma_ab(dq,sf,sK)
                for t in range(32):
                    for half in range(2):
                        rr=q0+w*16+t//4+8*half
                        if rr<T:
                            for nt in range(8):
                                col=nt*8+2*(t&3); dqa[rr,col]+=dq[nt][t,2*half]; dqa[rr,col+1]+=dq[nt][t,2*half+1]
        for w in range(4):
            for t in range(32):
                for half in range(2):
                    rr=k0+w*16+t//4+8*half
                    if rr>=T: continue
                    for nt in range(8):
                        col=nt*8+2*(t&3)
                        dK[rr,col:col+2]=W[w]['dk'][nt][t,2*half:2*half+2]*sc
                        dV[rr,col:col+2]=W[w]['dv'][nt][t,2*half:2*half+2]
    return dqa*sc, dK, dV

rng=np.random.default_rng(1)
for T in (1,65,130,200):
    q,k,v,do=[rng.uniform(-1.5,1.5,(T,D)) for _ in range(4)]
    O,lse,dq,dk,dv,Dl=ref(q,k,v,do)
    O2,L2=fwd2(q,k,v)
    e=lambda a,b: np.linalg.norm(a-b)/max(np.linalg.norm(b),1e-30)
    print(f"T={T} fwd2 out {e(O2,O):.2e} lse {e(L2,lse):.2e}", end='  ')
    g1,g2,g3=fused(q,k,v,do,lse,Dl)
    print(f"fused dq {e(g1,dq):.2e} dk {e(g2,dk):.2e} dv {e(g3,dv):.2e}", flush=True)
